# SPDX-License-Identifier: Apache-2.0
# Included by daemon/core/CMakeLists.txt. Pure logic, no I/O: the job state machine and the
# scheduler. The manager (manager.cmake) links both.

add_library(fp8d_lifecycle job_lifecycle.cc)
target_link_libraries(fp8d_lifecycle PUBLIC fp8_proto fp8_common)
# Every switch over a proto enum in this file is exhaustive with no default; a new enumerator
# must break the build here (see the comment at the top of job_lifecycle.cc).
set_source_files_properties(job_lifecycle.cc PROPERTIES COMPILE_OPTIONS "-Werror=switch")

add_library(fp8d_scheduler scheduler.cc)
target_link_libraries(fp8d_scheduler PUBLIC fp8_common)
