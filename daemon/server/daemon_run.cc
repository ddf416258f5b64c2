// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/daemon_run.h"

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <sstream>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <spdlog/spdlog.h>

#include "common/version.h"
#include "daemon/launcher/launcher.h"
#include "daemon/api/auth_policy.h"
#include "daemon/api/http_listener.h"
#include "daemon/api/http_metrics.h"
#include "daemon/api/job_env.h"
#include "daemon/api/job_service.h"
#include "daemon/api/reflection_v1.h"
#include "daemon/core/job_manager.h"
#include "daemon/server/data_dir_lock.h"
#include "daemon/server/io_watchdog.h"
#include "daemon/server/systemd_notify.h"
#include "daemon/server/unix_listener.h"
#include "daemon/store/job_store.h"

namespace fp8d::server {
namespace {

launcher::SlurmLauncherOptions SlurmOptions(const ServerConfig& config) {
  launcher::SlurmLauncherOptions o;
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

int LogErrorAndExit(const fp8::Status& status, int exit_code) {
  spdlog::error("{}", status.message());
  return exit_code;
}

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
  std::shared_ptr<const api::AuthPolicy> policy;
  // The sources SIGHUP reloads from --auth-tokens (tokens: empty, mtls: null when not configured).
  std::shared_ptr<api::TokenAuthPolicy> tokens;
  std::shared_ptr<api::MtlsAuthPolicy> mtls;
  std::shared_ptr<api::UnixPeerTable> unix_peers;
  api::Principal default_user;
};

// The sources, in order: bearer tokens, the client certificate, then the local peer (unix
// socket uids; loopback TCP as the default user with --loopback-role, only when fp8d listens on
// this machine alone).
fp8::StatusOr<AuthSetup> MakeAuth(const ServerConfig& config) {
  AuthSetup setup;
  struct passwd* pw = getpwnam(config.default_user.c_str());
  if (pw == nullptr) return fp8::InvalidArgumentError("--default-user " + config.default_user + ": no such user");
  if (pw->pw_uid == 0) return fp8::InvalidArgumentError("--default-user " + config.default_user + ": must not be root");
  auto loopback_role = api::ParseRole(config.loopback_role);
  if (!loopback_role.ok()) return fp8::InvalidArgumentError("--loopback-role: " + loopback_role.status().message());
  setup.default_user = {config.default_user, *loopback_role, static_cast<int64_t>(pw->pw_uid)};
  std::vector<api::AuthEntry> entries;
  if (!config.auth_tokens.empty()) {
    auto loaded = api::LoadAuthEntries(config.auth_tokens);
    if (!loaded.ok()) return loaded.status();
    entries = std::move(loaded).value();
  }
  // Asked first even without --auth-tokens: a token that is presented is always checked (with
  // none configured it is refused), never ignored in favour of the local peer's identity.
  setup.tokens = std::make_shared<api::TokenAuthPolicy>(entries);
  std::vector<std::shared_ptr<const api::AuthPolicy>> sources = {setup.tokens};
  if (!config.tls_client_ca.empty()) {
    setup.mtls = std::make_shared<api::MtlsAuthPolicy>(entries);
    sources.push_back(setup.mtls);
  }
  setup.unix_peers = std::make_shared<api::UnixPeerTable>();
  const bool local_only = IsLocalAddress(config.listen) &&
                          (config.http_listen.empty() || IsLocalAddress(config.http_listen));
  sources.push_back(std::make_shared<api::LocalPeerAuthPolicy>(setup.unix_peers,
                                                               setup.default_user, local_only));
  setup.policy = std::make_shared<api::ChainAuthPolicy>(std::move(sources));
  return setup;
}

// The flag combinations that cannot work (exit 2), checked before anything touches the disk:
// listen security, readable TLS and token files, the auth setup (returned), the job-env allowlist.
fp8::StatusOr<AuthSetup> CheckStartupFlags(const ServerConfig& config) {
  for (const auto& [flag, address] : {std::pair<std::string, std::string>{"--listen", config.listen},
                                      {"--http-listen", config.http_listen}}) {
    if (address.empty()) continue;
    if (fp8::Status s = CheckListenSecurity(flag, address, config); !s.ok()) return s;
  }
  for (const std::string& file : {config.tls_cert, config.tls_key, config.tls_client_ca, config.auth_tokens}) {
    if (!file.empty() && !Readable(file)) return fp8::InvalidArgumentError(file + ": cannot be read");
  }
  auto auth = MakeAuth(config);
  if (!auth.ok()) return auth.status();
  if (fp8::Status s = api::CheckJobEnvAllow(config.job_env_allow); !s.ok()) return s;
  return auth;
}

// Creates and locks --data-dir and sets the modes fp8d writes with; returns its absolute path.
fp8::StatusOr<std::string> PrepareDataDir(const ServerConfig& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(config.data_dir, ec);
  if (ec) return fp8::FailedPreconditionError("--data-dir " + config.data_dir + ": " + ec.message());
  const std::string data_dir = fs::absolute(config.data_dir).lexically_normal().string();
  // Before anything reads or writes the data dir: a second daemon touches nothing.
  if (fp8::Status locked = LockDataDir(data_dir); !locked.ok()) return locked;
  // Others may pass through (workers running as their owners reach their own job folders,
  // which they own) but not list it; the DB inside is 0600.
  chmod(data_dir.c_str(), 0711);
  umask(027);
  return data_dir;
}

fp8::StatusOr<std::unique_ptr<store::JobStore>> OpenStore(const std::string& data_dir) {
  store::SetCommitObserver(&api::RecordStoreCommit);
  auto opened = store::OpenSqliteJobStore(data_dir + "/fp8d.db");
  if (!opened.ok()) {
    return fp8::Status(opened.status().code(),
                       "opening " + data_dir + "/fp8d.db: " + opened.status().ToString());
  }
  // Only fp8d reads its store: jobs' specs and environments are in it.
  for (const char* suffix : {"", "-wal", "-shm"}) chmod((data_dir + "/fp8d.db" + suffix).c_str(), 0600);
  return opened;
}

core::ManagerOptions ManagerOptionsFor(const ServerConfig& config, const std::string& data_dir) {
  core::ManagerOptions options;
  options.data_dir = data_dir;
  options.worker_argv_prefix = ResolveWorker(config.worker);
  options.cancel_grace_ms = config.cancel_grace_ms;
  options.preemption_grace_ms = config.preemption_grace_ms;
  options.tick_ms = config.tick_ms;
  options.job_ttl_after_finished_ms = config.job_ttl_after_finished_ms;
  options.clean_worker_env = true;
  options.worker_env = config.worker_env;
  options.worker_env_allow = config.worker_env_allow;
  options.job_env_allow = config.job_env_allow;
  options.queues = config.queues;
  return options;
}

fp8::StatusOr<launcher::LocalLauncherOptions> LocalLauncherOptionsFor(const ServerConfig& config) {
  launcher::LocalLauncherOptions options;
  options.cpu_slots = config.cpu_slots;
  if (config.gpus == "none") {
    options.detect_gpus = false;
  } else if (config.gpus != "auto" && !config.gpus.empty()) {
    try {
      options.gpus = ParseGpuList(config.gpus);
    } catch (const std::exception&) {
      return fp8::InvalidArgumentError("--gpus " + config.gpus +
                                       ": expected auto, none or a comma-separated list of indices");
    }
    options.detect_gpus = false;
  }
  return options;
}

api::JobServiceOptions JobServiceOptionsFor(const ServerConfig& config, const AuthSetup& auth,
                                            const std::string& data_dir) {
  api::JobServiceOptions options;
  options.isolation.run_as_owner = config.run_jobs_as_owner && geteuid() == 0;
  options.isolation.default_uid = auth.default_user.uid;
  options.isolation.allow_root_jobs = config.allow_root_jobs;
  options.isolation.job_env_allow = config.job_env_allow;
  options.isolation.allowed_roots = config.allowed_roots;
  options.isolation.data_dir = data_dir;
  options.queues = config.queues;
  options.server_info.set_version(VersionText());
  options.server_info.set_commit(fp8::kGitCommit);
  options.server_info.set_launcher(config.launcher);
  return options;
}

// The io_context the manager lives on, the thread that runs it and the systemd notifier whose
// timers run on it. Stop() is the one way down on every exit path: the notifier first (its test
// fault hook may be holding the io thread), then io may run out and the thread is joined.
class ManagerIo {
 public:
  ManagerIo() : work_(boost::asio::make_work_guard(io_)) {}
  ManagerIo(const ManagerIo&) = delete;
  ManagerIo& operator=(const ManagerIo&) = delete;
  ~ManagerIo() { Stop(); }

  boost::asio::io_context& context() { return io_; }
  SystemdNotifier& notifier() { return *notifier_; }

  // `status_line` gives systemd's STATUS= text and is called on io.
  void Start(std::function<std::string()> status_line) {
    notifier_ = std::make_unique<SystemdNotifier>(io_, std::move(status_line));
    thread_ = std::thread([this] { io_.run(); });
    notifier_->Start();
  }

  void Stop() {
    if (!thread_.joinable()) return;
    notifier_->Stop();
    work_.reset();
    io_.stop();
    thread_.join();
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<SystemdNotifier> notifier_;
  std::thread thread_;
};

std::unique_ptr<core::JobManager> NewManager(const ServerConfig& config, core::ManagerOptions options,
                                             std::unique_ptr<store::JobStore> job_store,
                                             launcher::LocalLauncherOptions launcher_options,
                                             boost::asio::io_context& io, const core::Clock* clock,
                                             std::vector<launcher::Slot>* local_slots) {
  return core::NewJobManager(
      io, std::move(options), std::move(job_store),
      [launcher_options, &config, local_slots](launcher::LauncherListener* listener) {
        if (config.launcher == "slurm") return launcher::NewSlurmLauncher(SlurmOptions(config), listener);
        auto local = launcher::NewLocalLauncher(launcher_options, listener);
        *local_slots = local->Slots();
        return local;
      },
      clock);
}

// The gRPC front end. Member order is destruction order reversed: the unix listener and the v1
// reflection service outlive the server that uses them.
struct GrpcServer {
  explicit GrpcServer(std::shared_ptr<api::UnixPeerTable> unix_peers)
      : unix_listener(std::move(unix_peers)) {}
  grpc::HealthCheckServiceInterface* health() const { return server->GetHealthCheckService(); }

  UnixListener unix_listener;
  api::ReflectionV1Service reflection_v1{{"fp8d.v1.JobService", "grpc.health.v1.Health",
                                          "grpc.reflection.v1.ServerReflection",
                                          "grpc.reflection.v1alpha.ServerReflection"}};
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound TCP port; 0 on a unix socket
};

// Binds --listen (TCP, or a unix socket fp8d accepts on itself) and starts serving, NOT_SERVING
// until recovery has finished.
fp8::StatusOr<std::unique_ptr<GrpcServer>> StartGrpcServer(const ServerConfig& config,
                                                           api::JobServiceImpl& service,
                                                           std::shared_ptr<api::UnixPeerTable> unix_peers) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  auto rpc = std::make_unique<GrpcServer>(std::move(unix_peers));
  grpc::ServerBuilder builder;
  const bool on_unix = config.listen.rfind("unix:", 0) == 0;
  if (on_unix) {
    if (fp8::Status s = rpc->unix_listener.Bind(config.listen.substr(5)); !s.ok()) return s;
  } else {
    builder.AddListeningPort(config.listen, ServerCredentials(config), &rpc->port);
  }
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  // Per-call bookkeeping for a channelz service fp8d does not register.
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  // gRPC sets SO_REUSEPORT by default, which lets a second daemon bind the same port and take
  // half the connections: a port in use must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  builder.RegisterService(&rpc->reflection_v1);
  rpc->server = builder.BuildAndStart();
  if (rpc->server == nullptr || (!on_unix && rpc->port == 0)) {
    return fp8::UnavailableError("--listen " + config.listen +
                                 ": could not bind (is the address in use by another process?)");
  }
  rpc->health()->SetServingStatus(false);
  if (on_unix) rpc->unix_listener.Start(rpc->server.get());
  return rpc;
}

// Null without --http-listen. `ready` answers the readiness probe, `watchdog` the liveness one.
fp8::StatusOr<std::unique_ptr<api::HttpListener>> StartHttpListener(
    const ServerConfig& config, boost::asio::io_context& io, core::JobManager* manager,
    std::shared_ptr<const api::AuthPolicy> auth, const std::atomic<bool>& ready,
    const IoWatchdog& watchdog) {
  if (config.http_listen.empty()) return std::unique_ptr<api::HttpListener>();
  api::HttpOptions http_options;
  http_options.listen = config.http_listen;
  http_options.tls_cert = config.tls_cert;
  http_options.tls_key = config.tls_key;
  http_options.tls_client_ca = config.tls_client_ca;
  http_options.live = [&watchdog] { return watchdog.Live(); };
  auto http = std::make_unique<api::HttpListener>(io, manager, std::move(auth), http_options,
                                                  [&ready] { return ready.load(); });
  fp8::StatusOr<int> http_port = http->Start();
  if (!http_port.ok()) return http_port.status();
  spdlog::info("http listening on {}", BoundAddress(config.http_listen, *http_port));
  return http;
}

// Recovery runs on io; its end is the moment fp8d reports SERVING (gRPC health, HTTP readiness,
// systemd READY=1). A failed recovery sets `exit_code` and raises SIGTERM, so the main thread's
// sigwait runs the shutdown.
void StartRecovery(ManagerIo& io, core::JobManager& manager, api::JobServiceImpl& service,
                   grpc::HealthCheckServiceInterface& health, std::atomic<bool>& ready,
                   std::atomic<int>& exit_code) {
  const auto start_time = std::chrono::steady_clock::now();
  boost::asio::post(io.context(), [&, start_time] {
    manager.Start([&, start_time](fp8::Status status) {
      if (!status.ok()) {
        spdlog::error("recovery failed: {}", status.ToString());
        exit_code = 1;
        kill(getpid(), SIGTERM);
        return;
      }
      service.SetReady(true);
      ready = true;
      health.SetServingStatus(true);
      health.SetServingStatus("fp8d.v1.JobService", true);
      io.notifier().Ready();  // the same moment as SERVING
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start_time).count();
      spdlog::info("recovery finished in {} ms; SERVING", ms);
    });
  });
}

// Returns on SIGTERM or SIGINT. SIGHUP re-reads the TLS files and --auth-tokens and must not end
// fp8d; gRPC's own file watcher picks up its certificates.
void WaitForStopSignal(const ServerConfig& config, api::HttpListener* http, const AuthSetup& auth) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    spdlog::info("SIGHUP: TLS certificate files are re-read within {} s", config.tls_reload_s);
    if (http != nullptr && !config.tls_cert.empty()) {
      if (fp8::Status s = http->ReloadTls(); !s.ok()) spdlog::error("SIGHUP: {}", s.message());
    }
    if (!config.auth_tokens.empty()) {
      auto reloaded = api::ReloadAuthEntries(config.auth_tokens, auth.tokens.get(), auth.mtls.get());
      if (reloaded.ok()) {
        spdlog::info("SIGHUP: {} re-read, {} entries", config.auth_tokens, *reloaded);
      } else {
        spdlog::error("SIGHUP: {}; the previous tokens stay in force", reloaded.status().message());
      }
    }
  }
  spdlog::info("signal {}: shutting down (workers keep running)", sig);
}

// A listener failed after the gRPC server started: nothing was served yet, so no grace period.
void AbandonStartup(GrpcServer& rpc, api::JobServiceImpl& service, ManagerIo& io) {
  rpc.unix_listener.Stop();
  rpc.server->Shutdown(std::chrono::system_clock::now());
  service.Stop();
  io.Stop();
}

// Stops accepting (in-flight calls get 5 s while io still runs), then persists through the
// manager's Shutdown; workers keep running for the next fp8d. False when the manager took
// longer than 30 s.
bool ShutDown(ManagerIo& io, std::unique_ptr<core::JobManager>& manager, api::JobServiceImpl& service,
              GrpcServer& rpc, api::HttpListener* http, std::atomic<bool>& ready, IoWatchdog& watchdog) {
  io.notifier().Stopping();
  watchdog.Stop();  // it would set SERVING again
  service.SetReady(false);
  rpc.health()->SetServingStatus(false);
  ready = false;
  if (http != nullptr) http->Stop();
  rpc.unix_listener.Stop();
  rpc.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  service.Stop();
  std::promise<void> stopped;
  boost::asio::post(io.context(), [&] { manager->Shutdown([&] { stopped.set_value(); }); });
  const bool in_time = stopped.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!in_time) spdlog::error("manager shutdown timed out after 30 s");
  io.Stop();
  rpc.server.reset();
  manager.reset();
  spdlog::info("stopped");
  return in_time;
}

}  // namespace

int Run(const ServerConfig& config) {
  auto auth = CheckStartupFlags(config);
  if (!auth.ok()) return LogErrorAndExit(auth.status(), 2);
  auto data_dir = PrepareDataDir(config);
  if (!data_dir.ok()) return LogErrorAndExit(data_dir.status(), 1);
  // Workers inherit fp8d's environment (docs/design.md §4), so worker_env goes there.
  for (const auto& [key, value] : config.worker_env) setenv(key.c_str(), value.c_str(), 1);
  auto job_store = OpenStore(*data_dir);
  if (!job_store.ok()) return LogErrorAndExit(job_store.status(), 1);
  core::ManagerOptions options = ManagerOptionsFor(config, *data_dir);
  spdlog::info("worker: {}", fmt::join(options.worker_argv_prefix, " "));
  spdlog::info("launcher: {}", config.launcher);
  auto launcher_options = LocalLauncherOptionsFor(config);
  if (!launcher_options.ok()) return LogErrorAndExit(launcher_options.status(), 2);

  ManagerIo io;
  core::SystemClock clock;
  std::vector<launcher::Slot> local_slots;  // the local launcher's, for the queues' quotas
  std::unique_ptr<core::JobManager> manager = NewManager(config, std::move(options), std::move(job_store).value(),
                                                         *launcher_options, io.context(), &clock, &local_slots);
  if (config.launcher == "slurm") {
    if (!config.queues.empty()) spdlog::warn("queues: under --launcher slurm Slurm places every job; quotas and preemption do not apply");
  } else {
    int64_t gpus = 0, cpu_slots = 0;
    for (const launcher::Slot& slot : local_slots) ++(slot.gpu >= 0 ? gpus : cpu_slots);
    if (fp8::Status s = CheckQueueQuotas(config.queues, gpus, cpu_slots); !s.ok()) return LogErrorAndExit(s, 2);
  }
  // STATUS= is read on io, where the manager lives.
  io.Start([&manager] {
    const core::JobManager::ActiveCounts counts = manager->CountActive();
    return fmt::format("jobs: {} running, {} queued", counts.running, counts.queued);
  });
  api::JobServiceImpl service(io.context(), manager.get(), auth->policy,
                              JobServiceOptionsFor(config, *auth, *data_dir));
  auto rpc = StartGrpcServer(config, service, auth->unix_peers);
  if (!rpc.ok()) {
    spdlog::error("{}", rpc.status().message());
    io.Stop();
    return 1;
  }
  const std::string bound = BoundAddress(config.listen, (*rpc)->port);
  spdlog::info("listening on {} (data dir {})", bound, *data_dir);
  std::atomic<bool> ready{false};
  // Liveness after recovery: SERVING follows the io thread (NOT_SERVING while it is stuck).
  grpc::HealthCheckServiceInterface* health = (*rpc)->health();
  IoWatchdog watchdog(io.context(), std::chrono::milliseconds(config.health_io_bound_ms),
                      [&ready, health](bool live) {
                        if (!ready) return;
                        health->SetServingStatus(live);
                        health->SetServingStatus("fp8d.v1.JobService", live);
                      });
  watchdog.Start();
  auto http = StartHttpListener(config, io.context(), manager.get(), auth->policy, ready, watchdog);
  if (!http.ok()) {
    spdlog::error("{}", http.status().message());
    AbandonStartup(**rpc, service, io);
    return 2;
  }
  if (!config.addr_file.empty() && !WriteAddrFile(config.addr_file, bound)) {
    spdlog::error("--addr-file {}: cannot write", config.addr_file);
  }

  std::atomic<int> exit_code{0};
  StartRecovery(io, *manager, service, *(*rpc)->health(), ready, exit_code);
  WaitForStopSignal(config, http->get(), *auth);
  if (!ShutDown(io, manager, service, **rpc, http->get(), ready, watchdog)) exit_code = 1;
  return exit_code.load();
}

}  // namespace fp8d::server
