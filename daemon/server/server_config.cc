// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/server_config.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include "common/version.h"

namespace fp8d::server {
namespace fs = std::filesystem;

namespace {

// Applies a YAML key to `target` unless the flag was given on the command line.
template <typename T>
fp8::Status FromYaml(const YAML::Node& root, const char* key, CLI::Option* flag, T* target) {
  const YAML::Node node = root[key];
  if (!node || (flag != nullptr && flag->count() > 0)) return fp8::OkStatus();
  try {
    *target = node.as<T>();
  } catch (const YAML::Exception& e) {
    return fp8::InvalidArgumentError(std::string("config key ") + key + ": " + e.what());
  }
  return fp8::OkStatus();
}

// "1500" (ms), "1500ms", "2s": the poll interval's accepted forms.
bool ParseMs(const std::string& text, int64_t* ms) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || v < 0) return false;
  const std::string unit(end);
  if (unit.empty() || unit == "ms") {
    *ms = static_cast<int64_t>(v);
  } else if (unit == "s") {
    *ms = static_cast<int64_t>(v * 1000);
  } else {
    return false;
  }
  return true;
}

// The `slurm:` mapping: partition, account, qos, sbatch_args, poll_interval, gpus.
fp8::Status LoadSlurmSection(const YAML::Node& node, ServerConfig::Slurm* slurm) {
  if (!node.IsMap()) return fp8::InvalidArgumentError("config key slurm: must be a mapping");
  try {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "partition") {
        slurm->partition = v.as<std::string>();
      } else if (key == "account") {
        slurm->account = v.as<std::string>();
      } else if (key == "qos") {
        slurm->qos = v.as<std::string>();
      } else if (key == "sbatch_args") {
        slurm->sbatch_args = v.as<std::vector<std::string>>();
      } else if (key == "gpus") {
        slurm->gpus = v.as<bool>();
      } else if (key == "poll_interval") {
        if (!ParseMs(v.as<std::string>(), &slurm->poll_interval_ms) || slurm->poll_interval_ms <= 0) {
          return fp8::InvalidArgumentError("config key slurm.poll_interval: expected e.g. 1s or 500ms, got " +
                                           v.as<std::string>());
        }
      } else {
        return fp8::InvalidArgumentError("config key slurm." + key + ": unknown");
      }
    }
  } catch (const YAML::Exception& e) {
    return fp8::InvalidArgumentError(std::string("config key slurm: ") + e.what());
  }
  return fp8::OkStatus();
}

// A queue name: 1 to 64 of [A-Za-z0-9._-], starting with a letter or digit (it appears in job
// fields, metric labels and fp8ctl's table).
bool ValidQueueName(const std::string& name) {
  if (name.empty() || name.size() > 64 || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

fp8::StatusOr<core::QueueConfig> ParseQueue(const YAML::Node& node, const std::string& at) {
  if (!node.IsMap()) return fp8::InvalidArgumentError(at + ": must be a mapping {name, quota, weight, principals}");
  core::QueueConfig q;
  bool named = false;
  std::string key;
  try {
    for (const auto& kv : node) {
      key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (key == "name") {
        q.name = v.as<std::string>();
        named = true;
      } else if (key == "weight") {
        q.weight = v.as<double>();
        if (!(q.weight > 0) || !std::isfinite(q.weight)) {
          return fp8::InvalidArgumentError(at + ".weight: must be > 0, got " + v.as<std::string>());
        }
      } else if (key == "principals") {
        q.principals = v.as<std::vector<std::string>>();
      } else if (key == "quota") {
        if (!v.IsMap()) return fp8::InvalidArgumentError(at + ".quota: must be a mapping {gpus, cpu_slots}");
        for (const auto& qkv : v) {
          key = "quota." + qkv.first.as<std::string>();
          int64_t* target = key == "quota.gpus" ? &q.quota_gpus : key == "quota.cpu_slots" ? &q.quota_cpu_slots : nullptr;
          if (target == nullptr) return fp8::InvalidArgumentError(at + "." + key + ": unknown (gpus or cpu_slots)");
          *target = qkv.second.as<int64_t>();
          if (*target < 0) return fp8::InvalidArgumentError(at + "." + key + ": must be >= 0, got " + std::to_string(*target));
        }
      } else {
        return fp8::InvalidArgumentError(at + "." + key + ": unknown (name, quota, weight or principals)");
      }
    }
  } catch (const YAML::Exception& e) {
    return fp8::InvalidArgumentError(at + "." + key + ": " + e.what());
  }
  if (!named || q.name.empty()) return fp8::InvalidArgumentError(at + ".name: required");
  if (!ValidQueueName(q.name)) {
    return fp8::InvalidArgumentError(at + ".name " + q.name +
                                     ": 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit");
  }
  return q;
}

fp8::StatusOr<std::vector<core::QueueConfig>> ParseQueuesNode(const YAML::Node& node) {
  if (!node.IsSequence() || node.size() == 0) {
    return fp8::InvalidArgumentError("queues: must be a non-empty list of {name, quota, weight, principals}");
  }
  std::vector<core::QueueConfig> queues;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = "queues[" + std::to_string(i) + "]";
    FP8_ASSIGN_OR_RETURN(core::QueueConfig q, ParseQueue(node[i], at));
    for (const core::QueueConfig& earlier : queues) {
      if (earlier.name == q.name) return fp8::InvalidArgumentError(at + ".name " + q.name + ": duplicate queue name");
    }
    queues.push_back(std::move(q));
  }
  return queues;
}

fp8::Status LoadConfigFile(const std::string& path, const std::map<std::string, CLI::Option*>& flags,
                           ServerConfig* config) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return fp8::InvalidArgumentError("--config " + path + ": " + e.what());
  }
  if (root.IsNull()) return fp8::OkStatus();
  if (!root.IsMap()) return fp8::InvalidArgumentError("--config " + path + ": must be a mapping");
  static const char* kKeys[] = {"listen",   "data_dir",        "worker",  "cpu_slots",
                                "gpus",     "cancel_grace_ms", "tick_ms", "max_message_bytes",
                                "addr_file", "worker_env",     "log_level",
                                "tls_cert", "tls_key", "tls_client_ca", "auth_tokens",
                                "default_user", "allowed_roots", "http_listen", "job_ttl_after_finished",
                                "launcher", "slurm", "job_env_allow", "loopback_role",
                                "allow_root_jobs", "preemption_grace_ms", "audit_log", "health_io_bound_ms",
                                "queues"};
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) return fp8::InvalidArgumentError("config key " + key + ": unknown");
  }
  auto flag = [&](const char* name) -> CLI::Option* {
    auto it = flags.find(name);
    return it == flags.end() ? nullptr : it->second;
  };
  FP8_RETURN_IF_ERROR(FromYaml(root, "listen", flag("listen"), &config->listen));
  FP8_RETURN_IF_ERROR(FromYaml(root, "data_dir", flag("data_dir"), &config->data_dir));
  FP8_RETURN_IF_ERROR(FromYaml(root, "cpu_slots", flag("cpu_slots"), &config->cpu_slots));
  FP8_RETURN_IF_ERROR(FromYaml(root, "gpus", flag("gpus"), &config->gpus));
  FP8_RETURN_IF_ERROR(FromYaml(root, "cancel_grace_ms", flag("cancel_grace_ms"), &config->cancel_grace_ms));
  FP8_RETURN_IF_ERROR(FromYaml(root, "preemption_grace_ms", flag("preemption_grace_ms"), &config->preemption_grace_ms));
  FP8_RETURN_IF_ERROR(FromYaml(root, "tick_ms", flag("tick_ms"), &config->tick_ms));
  FP8_RETURN_IF_ERROR(FromYaml(root, "max_message_bytes", flag("max_message_bytes"), &config->max_message_bytes));
  FP8_RETURN_IF_ERROR(FromYaml(root, "addr_file", flag("addr_file"), &config->addr_file));
  FP8_RETURN_IF_ERROR(FromYaml(root, "log_level", flag("log_level"), &config->log_level));
  FP8_RETURN_IF_ERROR(FromYaml(root, "audit_log", flag("audit_log"), &config->audit_log));
  FP8_RETURN_IF_ERROR(FromYaml(root, "health_io_bound_ms", flag("health_io_bound_ms"), &config->health_io_bound_ms));
  FP8_RETURN_IF_ERROR(FromYaml(root, "worker_env", nullptr, &config->worker_env));
  if (root["job_ttl_after_finished"] && flag("job_ttl_after_finished")->count() == 0) {
    std::string text;
    FP8_RETURN_IF_ERROR(FromYaml(root, "job_ttl_after_finished", nullptr, &text));
    FP8_ASSIGN_OR_RETURN(config->job_ttl_after_finished_ms, ParseTtl(text, "config key job_ttl_after_finished"));
  }
  const std::pair<const char*, std::string*> remote_keys[] = {
      {"tls_cert", &config->tls_cert},         {"tls_key", &config->tls_key},
      {"tls_client_ca", &config->tls_client_ca}, {"auth_tokens", &config->auth_tokens},
      {"default_user", &config->default_user}, {"http_listen", &config->http_listen}};
  for (const auto& [key, target] : remote_keys) {
    FP8_RETURN_IF_ERROR(FromYaml(root, key, flag(key), target));
  }
  FP8_RETURN_IF_ERROR(FromYaml(root, "allowed_roots", flag("allowed_roots"), &config->allowed_roots));
  FP8_RETURN_IF_ERROR(FromYaml(root, "job_env_allow", flag("job_env_allow"), &config->job_env_allow));
  FP8_RETURN_IF_ERROR(FromYaml(root, "loopback_role", flag("loopback_role"), &config->loopback_role));
  FP8_RETURN_IF_ERROR(FromYaml(root, "allow_root_jobs", flag("allow_root_jobs"), &config->allow_root_jobs));
  FP8_RETURN_IF_ERROR(FromYaml(root, "launcher", flag("launcher"), &config->launcher));
  if (root["slurm"]) FP8_RETURN_IF_ERROR(LoadSlurmSection(root["slurm"], &config->slurm));
  if (root["queues"]) {
    FP8_ASSIGN_OR_RETURN(config->queues, ParseQueuesNode(root["queues"]));
  }
  if (root["worker"] && flag("worker")->count() == 0) {
    const YAML::Node w = root["worker"];
    try {
      if (w.IsSequence()) {
        config->worker = w.as<std::vector<std::string>>();
      } else {
        config->worker = {w.as<std::string>()};
      }
    } catch (const YAML::Exception& e) {
      return fp8::InvalidArgumentError(std::string("config key worker: ") + e.what());
    }
  }
  return fp8::OkStatus();
}

}  // namespace

std::string VersionText() {
  return std::string("fp8d ") + fp8::kVersion + " (commit " + fp8::kGitCommit + ", " +
         fp8::kBuildType + " build)";
}

fp8::StatusOr<std::vector<core::QueueConfig>> ParseQueues(const std::string& yaml_text) {
  YAML::Node node;
  try {
    node = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return fp8::InvalidArgumentError(std::string("queues: ") + e.what());
  }
  return ParseQueuesNode(node);
}

fp8::Status CheckQueueQuotas(const std::vector<core::QueueConfig>& queues, int64_t cluster_gpus,
                             int64_t cluster_cpu_slots) {
  for (size_t i = 0; i < queues.size(); ++i) {
    const std::string at = "queues[" + std::to_string(i) + "].quota.";
    if (queues[i].quota_gpus > cluster_gpus) {
      return fp8::InvalidArgumentError(at + "gpus: queue " + queues[i].name + " has a quota of " +
                                       std::to_string(queues[i].quota_gpus) + " GPU slots but the cluster has " +
                                       std::to_string(cluster_gpus));
    }
    if (queues[i].quota_cpu_slots > cluster_cpu_slots) {
      return fp8::InvalidArgumentError(at + "cpu_slots: queue " + queues[i].name + " has a quota of " +
                                       std::to_string(queues[i].quota_cpu_slots) + " CPU slots but the cluster has " +
                                       std::to_string(cluster_cpu_slots));
    }
  }
  return fp8::OkStatus();
}

fp8::StatusOr<int64_t> ParseTtl(const std::string& text, const std::string& field) {
  if (text == "0") return int64_t{0};
  size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = used > 0 ? text.substr(used) : "";
  const int64_t scale = unit == "ms" ? 1 : unit == "s" ? 1000 : unit == "m" ? 60000 : unit == "h" ? 3600000
                       : unit == "d" ? 86400000 : 0;
  if (used == 0 || value < 0 || scale == 0 || value > INT64_MAX / scale) {
    return fp8::InvalidArgumentError(field + " " + text + ": expected a whole number with a unit: 500ms, 90s, 30m, 12h, 7d (0 = keep)");
  }
  return value * scale;
}

fp8::Status CheckLogLevel(const std::string& level) {
  // spdlog maps an unknown name to `off`, which would silence the daemon without a word.
  for (const char* known : kLogLevels) {
    if (level == known) return fp8::OkStatus();
  }
  std::string valid;
  for (const char* known : kLogLevels) valid += std::string(valid.empty() ? "" : ", ") + known;
  return fp8::InvalidArgumentError("--log-level " + level + ": unknown level; valid levels: " + valid);
}

fp8::StatusOr<ServerConfig> ParseServerConfig(int argc, char** argv, int* exit_code) {
  ServerConfig config;
  std::string config_path;
  std::string worker;
  std::vector<std::string> worker_args;
  std::vector<std::string> worker_env;
  CLI::App app{"fp8d: the FP8 training and calibration job controller"};
  std::map<std::string, CLI::Option*> flags;
  flags["listen"] = app.add_option("--listen", config.listen, "gRPC address (loopback only)");
  flags["data_dir"] = app.add_option("--data-dir", config.data_dir,
                                     "SQLite store and job folders (default $STATE_DIRECTORY or ./fp8d-data)");
  app.add_option("--config", config_path, "YAML file with the same keys as the flags (data_dir, ...)");
  flags["worker"] = app.add_option("--worker", worker, "path of fp8-worker (default: beside fp8d)");
  app.add_option("--worker-arg", worker_args, "extra argument placed after the worker path");
  app.add_option("--worker-env", worker_env, "KEY=VALUE set in the workers' environment");
  flags["cpu_slots"] = app.add_option("--cpu-slots", config.cpu_slots, "CPU slots when there are no GPUs (0 = cores)");
  flags["gpus"] = app.add_option("--gpus", config.gpus, "auto | none | comma-separated GPU indices");
  flags["cancel_grace_ms"] = app.add_option("--cancel-grace-ms", config.cancel_grace_ms, "SIGTERM to SIGKILL grace");
  flags["preemption_grace_ms"] = app.add_option("--preemption-grace-ms", config.preemption_grace_ms,
                                                "SIGTERM to SIGKILL grace of a preempted attempt (its checkpoint)");
  flags["tick_ms"] = app.add_option("--tick-ms", config.tick_ms, "supervisor timer resolution");
  flags["max_message_bytes"] = app.add_option("--max-message-bytes", config.max_message_bytes, "largest request accepted");
  flags["addr_file"] = app.add_option("--addr-file", config.addr_file, "write the bound address to this file");
  flags["log_level"] = app.add_option("--log-level", config.log_level, "trace|debug|info|warn|error|critical|off");
  flags["audit_log"] = app.add_option("--audit-log", config.audit_log,
                                      "append audit lines to this file instead of stderr (any --log-level)");
  flags["health_io_bound_ms"] = app.add_option(
      "--health-io-bound-ms", config.health_io_bound_ms,
      "unhealthy (/healthz 503, gRPC NOT_SERVING) when the manager thread is stuck this long");
  std::string ttl;
  flags["job_ttl_after_finished"] = app.add_option("--job-ttl-after-finished", ttl,
                                                   "delete finished jobs this long after they end (7d, 12h; 0 = keep)");
  flags["tls_cert"] = app.add_option("--tls-cert", config.tls_cert, "PEM certificate chain: serve TLS");
  flags["tls_key"] = app.add_option("--tls-key", config.tls_key, "PEM private key of --tls-cert");
  flags["tls_client_ca"] = app.add_option("--tls-client-ca", config.tls_client_ca,
                                          "PEM CA bundle: require client certificates (mTLS)");
  app.add_option("--tls-reload-s", config.tls_reload_s, "seconds between checks of the certificate files");
  flags["auth_tokens"] = app.add_option("--auth-tokens", config.auth_tokens,
                                        "file of '<sha256> <principal> <role> [uid]' lines");
  flags["default_user"] = app.add_option("--default-user", config.default_user,
                                         "user of loopback callers without a token (not root)");
  flags["allowed_roots"] = app.add_option("--allowed-root", config.allowed_roots,
                                          "job paths must resolve under it (default: data dir, owner's home)");
  app.add_option("--run-jobs-as-owner", config.run_jobs_as_owner,
                 "when root, start workers as the job owner's uid (default true)");
  app.add_option("--worker-env-allow", config.worker_env_allow,
                 "environment name (or PREFIX*) workers inherit beyond the built-in allowlist");
  flags["job_env_allow"] = app.add_option(
      "--job-env-allow", config.job_env_allow,
      "name (or PREFIX*) a job's env: may set beyond the built-in allowlist; repeatable");
  flags["loopback_role"] = app.add_option("--loopback-role", config.loopback_role,
                                          "role of loopback TCP callers without a token: viewer | submitter");
  flags["allow_root_jobs"] = app.add_flag("--allow-root-jobs", config.allow_root_jobs,
                                          "run uid 0's own jobs as root (default: CreateJob refuses them)");
  flags["http_listen"] = app.add_option("--http-listen", config.http_listen,
                                        "HOST:PORT of the HTTP listener (metrics, health, JSON jobs)");
  flags["launcher"] = app.add_option("--launcher", config.launcher,
                                     "local (this machine) | slurm (a Slurm job per attempt; see the slurm: config key)");
  app.set_version_flag("--version", VersionText());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return fp8::InvalidArgumentError(e.what());
  }
  if (!config_path.empty()) {
    FP8_RETURN_IF_ERROR(LoadConfigFile(config_path, flags, &config));
  }
  if (!worker.empty()) {
    config.worker = {worker};
  }
  if (!ttl.empty()) {
    FP8_ASSIGN_OR_RETURN(config.job_ttl_after_finished_ms, ParseTtl(ttl, "--job-ttl-after-finished"));
  }
  // Without a worker program the arguments would become the program itself.
  if (!worker_args.empty() && config.worker.empty()) {
    return fp8::InvalidArgumentError(
        "--worker-arg needs --worker (or `worker:` in --config): the arguments follow the worker "
        "program");
  }
  for (const auto& a : worker_args) config.worker.push_back(a);
  FP8_RETURN_IF_ERROR(CheckLogLevel(config.log_level));
  for (const auto& kv : worker_env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fp8::InvalidArgumentError("--worker-env " + kv + ": expected KEY=VALUE");
    }
    config.worker_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (config.data_dir.empty()) {
    const char* state = std::getenv("STATE_DIRECTORY");  // systemd StateDirectory=
    config.data_dir = (state != nullptr && state[0] != '\0') ? std::string(state) : "./fp8d-data";
    // systemd may pass several directories separated by ':'; the first is ours.
    config.data_dir = config.data_dir.substr(0, config.data_dir.find(':'));
  }
  if (config.cpu_slots < 0) return fp8::InvalidArgumentError("--cpu-slots: must be >= 0");
  if (config.max_message_bytes <= 0) return fp8::InvalidArgumentError("--max-message-bytes: must be > 0");
  if (config.tick_ms <= 0) return fp8::InvalidArgumentError("--tick-ms: must be > 0");
  if (config.health_io_bound_ms <= 0) return fp8::InvalidArgumentError("--health-io-bound-ms: must be > 0");
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return fp8::InvalidArgumentError("--tls-cert, --tls-key: give both or neither");
  }
  if (!config.tls_client_ca.empty() && config.tls_cert.empty()) {
    return fp8::InvalidArgumentError("--tls-client-ca: needs --tls-cert and --tls-key");
  }
  if (config.tls_reload_s <= 0) return fp8::InvalidArgumentError("--tls-reload-s: must be > 0");
  // Never admin: a loopback port is open to every local user and process.
  if (config.loopback_role != "viewer" && config.loopback_role != "submitter") {
    return fp8::InvalidArgumentError("--loopback-role " + config.loopback_role + ": expected viewer or submitter");
  }
  if (config.launcher != "local" && config.launcher != "slurm") {
    return fp8::InvalidArgumentError("--launcher " + config.launcher + ": expected local or slurm");
  }
  return config;
}

bool IsLocalAddress(const std::string& listen) {
  if (listen.rfind("unix:", 0) == 0) return true;
  std::string host;
  if (!listen.empty() && listen[0] == '[') {
    const size_t close = listen.find(']');
    if (close == std::string::npos) return false;
    host = listen.substr(1, close - 1);
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == std::string::npos) return false;
    host = listen.substr(0, colon);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

fp8::Status CheckListenSecurity(const std::string& flag, const std::string& listen,
                                const ServerConfig& config) {
  if (IsLocalAddress(listen)) return fp8::OkStatus();
  std::string missing;
  if (config.tls_cert.empty() || config.tls_key.empty()) missing = "--tls-cert and --tls-key";
  if (config.auth_tokens.empty() && config.tls_client_ca.empty()) {
    missing += std::string(missing.empty() ? "" : ", and ") + "--auth-tokens or --tls-client-ca";
  }
  if (missing.empty()) return fp8::OkStatus();
  return fp8::FailedPreconditionError(
      flag + " " + listen + ": a non-loopback address needs TLS and authentication; missing " +
      missing + " (or listen on 127.0.0.1 or a unix: socket)");
}

std::vector<std::string> ResolveWorker(const std::vector<std::string>& configured) {
  if (!configured.empty()) return configured;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = self.parent_path();
    for (const fs::path& candidate :
         {dir / "fp8-worker", dir / ".." / ".." / "worker" / "fp8-worker"}) {
      if (access(candidate.c_str(), X_OK) == 0) return {fs::weakly_canonical(candidate).string()};
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      const fs::path candidate = fs::path(dir.empty() ? "." : dir) / "fp8-worker";
      if (access(candidate.c_str(), X_OK) == 0) return {candidate.string()};
    }
  }
  return {"fp8-worker"};  // launches will fail with a clear error naming it
}

}  // namespace fp8d::server
