// fp8d, the controller (docs/design.md §1, §7). Wires the SQLite store, the local agent and the
// job manager (one io_context thread) to the gRPC JobService (gRPC's own threads), with the
// health service reporting SERVING only once recovery has finished, and server reflection.
//
// Signals: SIGTERM/SIGINT are blocked in every thread and taken by the main thread with
// sigwait, so the shutdown sequence runs on a thread that may block: stop accepting (server
// Shutdown with a deadline, while io still runs so in-flight calls can finish), then the
// manager's Shutdown (persist; workers keep running for the next fp8d to re-adopt), exit 0.
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
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
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/agent/agent.h"
#include "daemon/api/auth_policy.h"
#include "daemon/api/http_listener.h"
#include "daemon/api/http_metrics.h"
#include "daemon/api/job_env.h"
#include "daemon/api/job_service.h"
#include "daemon/api/reflection_v1.h"
#include "daemon/core/job_manager.h"
#include "daemon/server/data_dir_lock.h"
#include "daemon/server/server_config.h"
#include "daemon/server/unix_listener.h"
#include "daemon/server/systemd_notify.h"
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

bool Readable(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

// Server credentials: TLS from files gRPC re-reads every --tls-reload-s seconds (a rotated
// certificate is served without a restart), mutual TLS when --tls-client-ca is set.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const ServerConfig& config) {
  if (config.tls_cert.empty()) return grpc::InsecureServerCredentials();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      config.tls_key, config.tls_cert, config.tls_client_ca,
      static_cast<unsigned int>(config.tls_reload_s));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!config.tls_client_ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

struct AuthSetup {
  std::shared_ptr<const fp8d::api::AuthPolicy> policy;
  // The sources SIGHUP reloads from --auth-tokens (tokens: empty, mtls: null when not configured).
  std::shared_ptr<fp8d::api::TokenAuthPolicy> tokens;
  std::shared_ptr<fp8d::api::MtlsAuthPolicy> mtls;
  std::shared_ptr<fp8d::api::UnixPeerTable> unix_peers;
  fp8d::api::Principal default_user;
};

// The sources, in order: bearer tokens, the client certificate, then the local peer (unix
// socket uids; loopback TCP as the default user with --loopback-role, only when fp8d listens on
// this machine alone).
fp8::StatusOr<AuthSetup> MakeAuth(const ServerConfig& config) {
  AuthSetup setup;
  struct passwd* pw = getpwnam(config.default_user.c_str());
  if (pw == nullptr) return fp8::InvalidArgumentError("--default-user " + config.default_user + ": no such user");
  if (pw->pw_uid == 0) return fp8::InvalidArgumentError("--default-user " + config.default_user + ": must not be root");
  auto loopback_role = fp8d::api::ParseRole(config.loopback_role);
  if (!loopback_role.ok()) return fp8::InvalidArgumentError("--loopback-role: " + loopback_role.status().message());
  setup.default_user = {config.default_user, *loopback_role, static_cast<int64_t>(pw->pw_uid)};
  std::vector<fp8d::api::AuthEntry> entries;
  if (!config.auth_tokens.empty()) {
    auto loaded = fp8d::api::LoadAuthEntries(config.auth_tokens);
    if (!loaded.ok()) return loaded.status();
    entries = std::move(loaded).value();
  }
  // Asked first even without --auth-tokens: a token that is presented is always checked (with
  // none configured it is refused), never ignored in favour of the local peer's identity.
  setup.tokens = std::make_shared<fp8d::api::TokenAuthPolicy>(entries);
  std::vector<std::shared_ptr<const fp8d::api::AuthPolicy>> sources = {setup.tokens};
  if (!config.tls_client_ca.empty()) {
    setup.mtls = std::make_shared<fp8d::api::MtlsAuthPolicy>(entries);
    sources.push_back(setup.mtls);
  }
  setup.unix_peers = std::make_shared<fp8d::api::UnixPeerTable>();
  const bool local_only = fp8d::server::IsLocalAddress(config.listen) &&
                          (config.http_listen.empty() || fp8d::server::IsLocalAddress(config.http_listen));
  sources.push_back(std::make_shared<fp8d::api::LocalPeerAuthPolicy>(setup.unix_peers,
                                                                     setup.default_user, local_only));
  setup.policy = std::make_shared<fp8d::api::ChainAuthPolicy>(std::move(sources));
  return setup;
}

int Run(const ServerConfig& config) {
  namespace fs = std::filesystem;
  for (const auto& [flag, address] : {std::pair<std::string, std::string>{"--listen", config.listen},
                                      {"--http-listen", config.http_listen}}) {
    if (address.empty()) continue;
    if (fp8::Status s = fp8d::server::CheckListenSecurity(flag, address, config); !s.ok()) {
      spdlog::error("{}", s.message());
      return 2;
    }
  }
  for (const std::string& file : {config.tls_cert, config.tls_key, config.tls_client_ca, config.auth_tokens}) {
    if (!file.empty() && !Readable(file)) {
      spdlog::error("{}: cannot be read", file);
      return 2;
    }
  }
  auto auth = MakeAuth(config);
  if (!auth.ok()) {
    spdlog::error("{}", auth.status().message());
    return 2;
  }
  if (fp8::Status s = fp8d::api::CheckJobEnvAllow(config.job_env_allow); !s.ok()) {
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
  // Before anything reads or writes the data dir: a second daemon touches nothing.
  if (fp8::Status locked = fp8d::server::LockDataDir(data_dir); !locked.ok()) {
    spdlog::error("{}", locked.message());
    return 1;
  }
  // Others may pass through (workers running as their owners reach their own job folders,
  // which they own) but not list it; the DB inside is 0600.
  chmod(data_dir.c_str(), 0711);
  umask(027);

  // Workers inherit fp8d's environment (docs/design.md §4), so worker_env goes there.
  for (const auto& [key, value] : config.worker_env) setenv(key.c_str(), value.c_str(), 1);

  fp8d::store::SetCommitObserver(&fp8d::api::RecordStoreCommit);
  auto store = fp8d::store::OpenSqliteJobStore(data_dir + "/fp8d.db");
  if (!store.ok()) {
    spdlog::error("opening {}/fp8d.db: {}", data_dir, store.status().ToString());
    return 1;
  }
  // Only fp8d reads its store: jobs' specs and environments are in it.
  for (const char* suffix : {"", "-wal", "-shm"}) chmod((data_dir + "/fp8d.db" + suffix).c_str(), 0600);

  fp8d::core::ManagerOptions options;
  options.data_dir = data_dir;
  options.worker_argv_prefix = fp8d::server::ResolveWorker(config.worker);
  options.cancel_grace_ms = config.cancel_grace_ms;
  options.tick_ms = config.tick_ms;
  options.job_ttl_after_finished_ms = config.job_ttl_after_finished_ms;
  options.clean_worker_env = true;
  options.worker_env = config.worker_env;
  options.worker_env_allow = config.worker_env_allow;
  options.job_env_allow = config.job_env_allow;
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
  // STATUS= is read on io, where the manager lives.
  fp8d::server::SystemdNotifier notifier(io, [&manager] {
    const fp8d::core::JobManager::ActiveCounts counts = manager->CountActive();
    return fmt::format("jobs: {} running, {} queued", counts.running, counts.queued);
  });
  std::thread io_thread([&io] { io.run(); });
  notifier.Start();

  fp8d::api::JobServiceOptions service_options;
  service_options.isolation.run_as_owner = config.run_jobs_as_owner && geteuid() == 0;
  service_options.isolation.default_uid = auth->default_user.uid;
  service_options.isolation.allow_root_jobs = config.allow_root_jobs;
  service_options.isolation.job_env_allow = config.job_env_allow;
  service_options.isolation.allowed_roots = config.allowed_roots;
  service_options.isolation.data_dir = data_dir;
  fp8d::api::JobServiceImpl service(io, manager.get(), auth->policy, service_options);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const bool on_unix = config.listen.rfind("unix:", 0) == 0;
  fp8d::server::UnixListener unix_listener(auth->unix_peers);
  if (on_unix) {
    if (fp8::Status s = unix_listener.Bind(config.listen.substr(5)); !s.ok()) {
      spdlog::error("{}", s.message());
      notifier.Stop();
      work.reset();
      io.stop();
      io_thread.join();
      return 1;
    }
  } else {
    builder.AddListeningPort(config.listen, ServerCredentials(config), &port);
  }
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  // Per-call bookkeeping for a channelz service fp8d does not register.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  // gRPC sets SO_REUSEPORT by default, which lets a second daemon bind the same port and take
  // half the connections: a port in use must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  fp8d::api::ReflectionV1Service reflection_v1(
      {"fp8d.v1.JobService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
       "grpc.reflection.v1alpha.ServerReflection"});
  builder.RegisterService(&reflection_v1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (!on_unix && port == 0)) {
    spdlog::error("--listen {}: could not bind (is the address in use by another process?)",
                  config.listen);
    notifier.Stop();
    work.reset();
    io.stop();
    io_thread.join();
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  if (on_unix) unix_listener.Start(server.get());
  const std::string bound = BoundAddress(config.listen, port);
  spdlog::info("listening on {} (data dir {})", bound, data_dir);
  std::atomic<bool> ready{false};
  std::unique_ptr<fp8d::api::HttpListener> http;
  if (!config.http_listen.empty()) {
    fp8d::api::HttpOptions http_options;
    http_options.listen = config.http_listen;
    http_options.tls_cert = config.tls_cert;
    http_options.tls_key = config.tls_key;
    http_options.tls_client_ca = config.tls_client_ca;
    http = std::make_unique<fp8d::api::HttpListener>(io, manager.get(), auth->policy, http_options,
                                                     [&ready] { return ready.load(); });
    fp8::StatusOr<int> http_port = http->Start();
    if (!http_port.ok()) {
      spdlog::error("{}", http_port.status().message());
      http.reset();
      unix_listener.Stop();
      server->Shutdown(std::chrono::system_clock::now());
      service.Stop();
      notifier.Stop();
      work.reset();
      io.stop();
      io_thread.join();
      return 2;
    }
    spdlog::info("http listening on {}", BoundAddress(config.http_listen, *http_port));
  }
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
      ready = true;
      health->SetServingStatus(true);
      health->SetServingStatus("fp8d.v1.JobService", true);
      notifier.Ready();  // the same moment as SERVING
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start_time).count();
      spdlog::info("recovery finished in {} ms; SERVING", ms);
    });
  });

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    // gRPC's file watcher reloads the certificates; SIGHUP only must not end fp8d.
    spdlog::info("SIGHUP: TLS certificate files are re-read within {} s", config.tls_reload_s);
    if (http != nullptr && !config.tls_cert.empty()) {
      if (fp8::Status s = http->ReloadTls(); !s.ok()) spdlog::error("SIGHUP: {}", s.message());
    }
    if (!config.auth_tokens.empty()) {
      auto reloaded = fp8d::api::ReloadAuthEntries(config.auth_tokens, auth->tokens.get(), auth->mtls.get());
      if (reloaded.ok()) {
        spdlog::info("SIGHUP: {} re-read, {} entries", config.auth_tokens, *reloaded);
      } else {
        spdlog::error("SIGHUP: {}; the previous tokens stay in force", reloaded.status().message());
      }
    }
  }
  spdlog::info("signal {}: shutting down (workers keep running)", sig);
  notifier.Stopping();

  service.SetReady(false);
  health->SetServingStatus(false);
  ready = false;
  if (http != nullptr) http->Stop();
  unix_listener.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  service.Stop();
  std::promise<void> stopped;
  boost::asio::post(io, [&] { manager->Shutdown([&] { stopped.set_value(); }); });
  if (stopped.get_future().wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    spdlog::error("manager shutdown timed out after 30 s");
    exit_code = 1;
  }
  notifier.Stop();
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
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Many clients and watchers: the soft fd limit up to the hard one.
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }

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
