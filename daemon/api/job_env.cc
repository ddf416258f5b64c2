// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/job_env.h"

#include <cctype>

namespace fp8d::api {

namespace {

// The built-in allowlist; job_env.h says why each entry loads nothing.
constexpr const char* kJobEnvAllowed[] = {
    "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_WAIT_POLICY", "OMP_DYNAMIC",
    "OMP_SCHEDULE", "OMP_STACKSIZE",
    "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_MODULE_LOADING",
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME",
    "NCCL_NET_GDR_LEVEL", "NCCL_CROSS_NIC",
    "TZ", "LANG", "LC_*",
    "FP8_*"};

constexpr size_t kMaxVariables = 64;
constexpr size_t kMaxKey = 128;
constexpr size_t kMaxValue = 4096;

fp8::Status Bad(const std::string& field, const std::string& why) {
  return fp8::InvalidArgumentError(field + ": " + why);
}

bool IsName(std::string_view key) {
  if (key.empty() || key.size() > kMaxKey || std::isdigit(static_cast<unsigned char>(key[0]))) {
    return false;
  }
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

bool AnyMatches(const auto& patterns, std::string_view name) {
  for (std::string_view p : patterns) {
    if (MatchesEnvPattern(p, name)) return true;
  }
  return false;
}

// TZ and the locale variables name data files glibc reads; only the system's own may be named.
fp8::Status CheckValue(const std::string& field, std::string_view key, std::string_view value) {
  if (key == "TZ") {
    const std::string_view name = value.substr(value.starts_with(':') ? 1 : 0);
    if (name.starts_with('/') || name.find("..") != std::string_view::npos) {
      return Bad(field, "must name a zone under the system's zoneinfo, not a path");
    }
  } else if ((key == "LANG" || key.starts_with("LC_")) && value.find('/') != std::string_view::npos) {
    return Bad(field, "must name a locale, not a path");
  }
  return fp8::OkStatus();
}

}  // namespace

bool MatchesEnvPattern(std::string_view pattern, std::string_view name) {
  const size_t star = pattern.find('*');
  if (star == std::string_view::npos) return pattern == name;
  const std::string_view head = pattern.substr(0, star);
  const std::string_view tail = pattern.substr(star + 1);
  return name.size() >= head.size() + tail.size() && name.starts_with(head) && name.ends_with(tail);
}

fp8::Status CheckJobEnvAllow(const std::vector<std::string>& operator_allow) {
  for (const std::string& entry : operator_allow) {
    const std::string where = "--job-env-allow " + entry;
    const bool prefix = !entry.empty() && entry.back() == '*';
    const std::string name = prefix ? entry.substr(0, entry.size() - 1) : entry;
    if (!(prefix && name.empty()) && !IsName(name)) {
      return fp8::InvalidArgumentError(where + ": expected a variable name or PREFIX*");
    }
    // A prefix whose every name starts inside a refused prefix ("LD_*", "LD_P*") admits nothing.
    for (std::string_view never : kJobEnvNever) {
      const bool never_prefix = never.ends_with('*') && never.find('*') == never.size() - 1;
      const bool covered = prefix ? never_prefix && name.starts_with(never.substr(0, never.size() - 1))
                                  : MatchesEnvPattern(never, name);
      if (covered) {
        return fp8::InvalidArgumentError(where + ": " + std::string(never) +
                                         " makes a loader, shell or interpreter load code and is "
                                         "never allowed in job.env");
      }
    }
  }
  return fp8::OkStatus();
}

fp8::Status ValidateJobEnv(const fp8d::v1::Job& job, const std::vector<std::string>& operator_allow) {
  if (static_cast<size_t>(job.env_size()) > kMaxVariables) {
    return Bad("job.env", "at most " + std::to_string(kMaxVariables) + " variables");
  }
  for (const auto& [key, value] : job.env()) {
    const std::string field = "job.env[" + key + "]";
    if (!IsName(key)) {
      return Bad(field, "key must match [A-Za-z_][A-Za-z0-9_]* (at most " + std::to_string(kMaxKey) +
                            " characters)");
    }
    if (key.starts_with("FP8D_")) return Bad(field, "not allowed: FP8D_* variables are set by the launcher");
    if (AnyMatches(kJobEnvNever, key)) {
      return Bad(field, "not allowed: it can make the loader, a shell or an interpreter load code "
                        "or files named by its value, so no --job-env-allow admits it");
    }
    if (!AnyMatches(kJobEnvAllowed, key) && !AnyMatches(operator_allow, key)) {
      return Bad(field, "not allowed: not on the job environment allowlist (allow it with "
                        "--job-env-allow " + key + ")");
    }
    if (value.size() > kMaxValue) return Bad(field, "value must be at most " + std::to_string(kMaxValue) + " bytes");
    if (value.find('\0') != std::string::npos) return Bad(field, "value must not contain NUL");
    FP8_RETURN_IF_ERROR(CheckValue(field, key, value));
  }
  return fp8::OkStatus();
}

}  // namespace fp8d::api
