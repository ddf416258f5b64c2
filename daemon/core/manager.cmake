# SPDX-License-Identifier: Apache-2.0
# Included by daemon/core/CMakeLists.txt. fp8d_core: the JobManager (commands, transitions,
# scheduling rounds, supervisor, recovery, watch fan-out) on top of the pure lifecycle and
# scheduler libraries (lifecycle_scheduler.cmake), the store and the launcher.
find_package(Boost REQUIRED)
find_package(spdlog REQUIRED)

add_library(fp8d_core
  attempt_launcher.cc
  attempt_verdict.cc
  blocking_worker.cc
  create_batcher.cc
  dependencies.cc
  failpoint.cc
  job_accounting.cc
  job_admission.cc
  job_cache.cc
  job_dependencies.cc
  job_counters.cc
  job_fields.cc
  job_manager.cc
  job_preemption.cc
  job_recovery.cc
  job_retention.cc
  job_scheduling.cc
  job_supervisor.cc
  job_writer.cc
  new_job.cc
  usage.cc
  watch_hub.cc)
target_link_libraries(fp8d_core
  PUBLIC fp8d_store fp8d_launcher fp8d_lifecycle fp8d_scheduler fp8d_job_env fp8_jobspec fp8_proto fp8_common
         Boost::headers spdlog::spdlog nlohmann_json::nlohmann_json Threads::Threads)
