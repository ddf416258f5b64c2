// SPDX-License-Identifier: Apache-2.0
// fp8d's configuration: command-line flags, an optional YAML file with the same keys, and the
// defaults of docs/design.md §7. Precedence: flag > config file > default.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/core/queues.h"

namespace fp8d::server {

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";
  std::string data_dir;                 // default: $STATE_DIRECTORY, else ./fp8d-data
  std::vector<std::string> worker;      // argv prefix of the worker; default: see ResolveWorker
  int cpu_slots = 0;                    // 0 = number of cores (used when there are no GPUs)
  std::string gpus = "auto";            // auto (detect) | none | comma-separated indices
  int64_t cancel_grace_ms = 10000;      // SIGTERM → SIGKILL for cancelled / timed-out workers
  int64_t preemption_grace_ms = 30000;  // SIGTERM → SIGKILL for preempted workers (checkpoint time)
  int64_t tick_ms = 50;                 // supervisor timer resolution
  int max_message_bytes = 4 << 20;      // larger requests get RESOURCE_EXHAUSTED
  std::string addr_file;                // write the bound address here (port 0 → chosen port)
  std::map<std::string, std::string> worker_env;  // set in fp8d's environment, so workers inherit it
  std::string log_level = "info";
  // Audit lines (one JSON object each) go to this file, appended, instead of stderr; they are
  // written whatever log_level says.
  std::string audit_log;
  // /healthz answers 503 and gRPC health NOT_SERVING when the manager's io thread has not run
  // the watchdog's ping for this long.
  int64_t health_io_bound_ms = 10000;
  // Finished jobs are deleted this long after they end ("7d", "12h", "30m", "90s"); 0 = kept.
  int64_t job_ttl_after_finished_ms = 0;

  // Remote access (TLS, auth, HTTP) and local isolation.
  std::string tls_cert;                 // PEM server certificate chain; with tls_key enables TLS
  std::string tls_key;                  // PEM private key
  std::string tls_client_ca;            // PEM CA bundle: require and verify client certificates
  int tls_reload_s = 5;                 // how often the certificate files are checked for changes
  std::string auth_tokens;              // "<sha256> <principal> <role> [uid]" lines
  std::string default_user = "nobody";  // loopback callers without credentials act as this user
  std::vector<std::string> allowed_roots;      // job paths must resolve under these (see api)
  bool run_jobs_as_owner = true;        // when root: workers run as the owner's uid
  std::vector<std::string> worker_env_allow;   // extra names (or PREFIX*) workers inherit
  std::vector<std::string> job_env_allow;      // extra names (or PREFIX*) a job's env: may set
  // Role of loopback TCP callers without a credential: viewer (read-only) or submitter.
  std::string loopback_role = "viewer";
  bool allow_root_jobs = false;         // uid 0's own jobs run as root (else CreateJob refuses them)
  std::string http_listen;              // HOST:PORT of the HTTP listener; empty: none
  std::string launcher = "local";       // local | slurm
  struct Slurm {
    std::string partition, account, qos;  // defaults for jobs that name none
    std::vector<std::string> sbatch_args; // appended to every sbatch
    int64_t poll_interval_ms = 1000;      // squeue period ("1s", "500ms" or ms in YAML)
    bool gpus = false;                    // ranks are GPUs: --gres=gpu:<ranks_per_node>
  } slurm;
  // The scheduler's queues (YAML `queues:` only); empty: one queue `default` of the whole cluster.
  std::vector<core::QueueConfig> queues;
};

// The `queues:` sequence of --config: [{name, quota: {gpus, cpu_slots}, weight, principals}].
// INVALID_ARGUMENT naming the entry's key (`queues[1].weight`): an empty, invalid or duplicate
// name, a negative quota, a weight <= 0, an unknown key.
fp8::StatusOr<std::vector<core::QueueConfig>> ParseQueues(const std::string& yaml_text);

// INVALID_ARGUMENT naming `queues[i].quota.gpus` (or `.cpu_slots`) for a queue whose quota is
// more than the cluster has. Checked once the launcher knows its slots.
fp8::Status CheckQueueQuotas(const std::vector<core::QueueConfig>& queues, int64_t cluster_gpus,
                             int64_t cluster_cpu_slots);

// "7d", "12h", "30m", "90s", "500ms", "0" → milliseconds; INVALID_ARGUMENT naming `field`.
fp8::StatusOr<int64_t> ParseTtl(const std::string& text, const std::string& field);

// The levels --log-level accepts (spdlog's names).
inline constexpr const char* kLogLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};

// INVALID_ARGUMENT listing the valid levels unless `level` is one of kLogLevels.
fp8::Status CheckLogLevel(const std::string& level);

// "fp8d 0.1.0 (commit abc123, RelWithDebInfo build)".
std::string VersionText();

// Parses argv (CLI11) and the --config file. Returns INVALID_ARGUMENT naming the flag or key.
// `exit_code` is set (and the config unusable) when CLI11 handled --help or a usage error.
fp8::StatusOr<ServerConfig> ParseServerConfig(int argc, char** argv, int* exit_code);

// True for loopback HOST:PORT addresses and unix: sockets.
bool IsLocalAddress(const std::string& listen);
// OK for local addresses; for any other, FAILED_PRECONDITION naming the missing flags unless
// TLS (--tls-cert, --tls-key) and an auth source (--auth-tokens or --tls-client-ca) are set.
fp8::Status CheckListenSecurity(const std::string& flag, const std::string& listen,
                                const ServerConfig& config);

// The worker argv when --worker was not given: fp8-worker beside the fp8d binary, then
// ../../worker/fp8-worker relative to it (the build tree), then PATH.
std::vector<std::string> ResolveWorker(const std::vector<std::string>& configured);

}  // namespace fp8d::server
