// fp8d: the controller daemon (design §1, §7). Wires the SQLite store, the local agent and the
// job manager (one io_context thread) to the gRPC JobService (gRPC's own threads), with the
// health service reporting SERVING only once recovery has finished, and server reflection.
//
// Signals: SIGTERM/SIGINT are blocked in every thread and taken by the main thread with
// sigwait, so the shutdown sequence runs on a thread that may block: stop accepting (server
// Shutdown with a deadline, while io still runs so in-flight calls can finish), then the
// manager's Shutdown (persist; workers keep running for the next fp8d to re-adopt), exit 0.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <absl/synchronization/mutex.h>
#include <boost/asio/post.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/agent/agent.h"
#include "daemon/api/auth_policy.h"
#include "daemon/api/job_service.h"
#include "daemon/core/job_manager.h"
#include "daemon/server/server_config.h"
#include "daemon/store/job_store.h"

namespace {

using fp8d::server::ServerConfig;

fp8d::agent::SlurmAgentOptions SlurmOptions(const fp8d::server::ServerConfig& config) {
  fp8d::agent::SlurmAgentOptions o;
  o.partition = config.slurm.partition;
  o.account = config.slurm.account;
  o.qos = config.slurm.qos;
  o.sbatch_args = config.slurm.sbatch_args;
  o.poll_interval_ms = static_cast<int>(config.slurm.poll_interval_ms);
  o.gpus = config.slurm.gpus;
  return o;
}

std::vector<int> ParseGpuList(const std::string& gpus) {
  std::vector<int> out;
  std::stringstream ss(gpus);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::stoi(item));
  }
  return out;
}

// Written atomically (temp + rename) so a reader never sees half an address.
bool WriteAddrFile(const std::string& path, const std::string& addr) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << addr << "\n";
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

std::string BoundAddress(const std::string& listen, int port) {
  if (listen.rfind("unix:", 0) == 0) return listen;
  const size_t colon = listen.rfind(':');
  return listen.substr(0, colon) + ":" + std::to_string(port);
}

int Run(const ServerConfig& config) {
  namespace fs = std::filesystem;
  if (fp8::Status s = fp8d::server::CheckLoopback(config.listen); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  std::error_code ec;
  fs::create_directories(config.data_dir, ec);
  if (ec) {
    spdlog::error("--data-dir {}: {}", config.data_dir, ec.message());
    return 1;
  }
  const std::string data_dir = fs::absolute(config.data_dir).lexically_normal().string();

  // Workers inherit fp8d's environment (design §4), so worker_env goes there.
  for (const auto& [key, value] : config.worker_env) setenv(key.c_str(), value.c_str(), 1);

  auto store = fp8d::store::OpenSqliteJobStore(data_dir + "/fp8d.db");
  if (!store.ok()) {
    spdlog::error("opening {}/fp8d.db: {}", data_dir, store.status().ToString());
    return 1;
  }

  fp8d::core::ManagerOptions options;
  options.data_dir = data_dir;
  options.worker_argv_prefix = fp8d::server::ResolveWorker(config.worker);
  options.cancel_grace_ms = config.cancel_grace_ms;
  options.tick_ms = config.tick_ms;
  spdlog::info("worker: {}", fmt::join(options.worker_argv_prefix, " "));
  spdlog::info("launcher: {}", config.launcher);

  fp8d::agent::LocalAgentOptions agent_options;
  agent_options.cpu_slots = config.cpu_slots;
  if (config.gpus == "none") {
    agent_options.detect_gpus = false;
  } else if (config.gpus != "auto" && !config.gpus.empty()) {
    try {
      agent_options.gpus = ParseGpuList(config.gpus);
    } catch (const std::exception&) {
      spdlog::error("--gpus {}: expected auto, none or a comma-separated list of indices", config.gpus);
      return 2;
    }
    agent_options.detect_gpus = false;
  }

  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  fp8d::core::SystemClock clock;
  std::unique_ptr<fp8d::core::JobManager> manager = fp8d::core::NewJobManager(
      io, options, std::move(store).value(),
      [agent_options, &config](fp8d::agent::AgentListener* listener) {
        if (config.launcher == "slurm") return fp8d::agent::NewSlurmAgent(SlurmOptions(config), listener);
        return fp8d::agent::NewLocalAgent(agent_options, listener);
      },
      &clock);
  std::thread io_thread([&io] { io.run(); });

  fp8d::api::JobServiceImpl service(io, manager.get(),
                                    std::make_shared<fp8d::api::AllowLocalAuthPolicy>());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  // Per-call bookkeeping for a channelz service fp8d does not register.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (config.listen.rfind("unix:", 0) != 0 && port == 0)) {
    spdlog::error("--listen {}: could not bind", config.listen);
    work.reset();
    io.stop();
    io_thread.join();
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  const std::string bound = BoundAddress(config.listen, port);
  spdlog::info("listening on {} (data dir {})", bound, data_dir);
  if (!config.addr_file.empty() && !WriteAddrFile(config.addr_file, bound)) {
    spdlog::error("--addr-file {}: cannot write", config.addr_file);
  }

  std::atomic<int> exit_code{0};
  const auto start_time = std::chrono::steady_clock::now();
  boost::asio::post(io, [&] {
    manager->Start([&](fp8::Status status) {
      if (!status.ok()) {
        spdlog::error("recovery failed: {}", status.ToString());
        exit_code = 1;
        kill(getpid(), SIGTERM);  // the main thread's sigwait runs the shutdown
        return;
      }
      service.SetReady(true);
      health->SetServingStatus(true);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start_time).count();
      spdlog::info("recovery finished in {} ms; SERVING", ms);
    });
  });

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: shutting down (workers keep running)", sig);

  service.SetReady(false);
  health->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  service.Stop();
  std::promise<void> stopped;
  boost::asio::post(io, [&] { manager->Shutdown([&] { stopped.set_value(); }); });
  if (stopped.get_future().wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    spdlog::error("manager shutdown timed out after 30 s");
    exit_code = 1;
  }
  work.reset();
  io.stop();
  io_thread.join();
  server.reset();
  manager.reset();
  spdlog::info("stopped");
  return exit_code.load();
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC locks absl mutexes on every call, and this absl build tracks each lock in a deadlock
  // graph (GraphCycles, ~3% of all CPU under 64 concurrent CreateJobs). A debugging aid: off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Before any thread exists, so every thread inherits the mask and only sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto logger = spdlog::stderr_color_mt("fp8d");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  int cli_exit = -1;  // set when CLI11 handled --help or a usage error itself
  auto config = fp8d::server::ParseServerConfig(argc, argv, &cli_exit);
  if (!config.ok()) {
    if (cli_exit >= 0) return cli_exit == 0 ? 0 : 2;
    spdlog::error("{}", config.status().message());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  return Run(*config);
}
