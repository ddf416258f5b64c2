// SPDX-License-Identifier: Apache-2.0
// Which variables a job may set in its workers' environment (Job.env). A worker may run as
// root (--allow-root-jobs) or as fp8d's own user (--run-jobs-as-owner=false), so a variable
// that makes the loader, a shell, an interpreter or a library load code or open a path of the
// caller's choosing would run the caller's code with those rights. Job.env therefore admits
// only names on an allowlist of values-only tuning knobs, plus the operator's
// --job-env-allow names; the names in kJobEnvNever are refused whatever the operator allows.
//
// The built-in allowlist, and why each entry loads nothing:
//   OMP_NUM_THREADS OMP_PROC_BIND OMP_PLACES OMP_WAIT_POLICY OMP_DYNAMIC OMP_SCHEDULE
//   OMP_STACKSIZE          OpenMP thread tuning: numbers and keywords (not OMP_TOOL_LIBRARIES,
//                          which dlopens, nor OMP_TOOL_VERBOSE_INIT, which names a file)
//   CUDA_LAUNCH_BLOCKING CUDA_DEVICE_MAX_CONNECTIONS CUDA_MODULE_LOADING
//                          CUDA runtime switches (not CUDA_VISIBLE_DEVICES: the launcher
//                          places ranks on GPUs; not CUDA_CACHE_PATH: a directory it writes)
//   NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_ALGO NCCL_PROTO NCCL_MIN_NCHANNELS NCCL_MAX_NCHANNELS
//   NCCL_BUFFSIZE NCCL_NTHREADS NCCL_P2P_DISABLE NCCL_P2P_LEVEL NCCL_SHM_DISABLE
//   NCCL_IB_DISABLE NCCL_IB_HCA NCCL_SOCKET_IFNAME NCCL_NET_GDR_LEVEL NCCL_CROSS_NIC
//                          NCCL tuning values, listed one by one: NCCL_* also holds
//                          NCCL_NET_PLUGIN / NCCL_TUNER_PLUGIN / NCCL_PROFILER_PLUGIN
//                          (dlopen), NCCL_CONF_FILE (a file of more NCCL_* settings),
//                          NCCL_TOPO_FILE / NCCL_GRAPH_FILE (read) and NCCL_DEBUG_FILE /
//                          NCCL_TOPO_DUMP_FILE (written)
//   TZ LANG LC_*           time zone and locale names; a value naming a path (a leading '/',
//                          '..', or any '/' in a locale) is refused: glibc would read a file
//                          of the caller's choosing as tz or locale data
//   FP8_*                  fp8-worker's own knobs (FP8D_* are the launcher's)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fp8d/v1/job.pb.h"

namespace fp8d::api {

// Loader, shell and interpreter variables (and prefixes, ending in '*'): each makes a program
// load code, or look for programs, libraries or modules, where its value says.
// CUDA_VISIBLE_DEVICES and FP8D_* are the launcher's: a job may not move itself to other GPUs
// or pose as another attempt.
inline constexpr const char* kJobEnvNever[] = {
    // the dynamic loader and glibc
    "LD_*", "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN",
    "LOCPATH", "MALLOC_*", "NLSPATH", "RES_OPTIONS", "RESOLV_*", "TZDIR", "TMPDIR",
    // where programs and their dotfiles are found
    "PATH", "HOME", "SHELL", "ZDOTDIR", "XDG_CONFIG_*",
    // shells
    "BASH_ENV", "ENV", "BASH_FUNC_*", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS",
    "CDPATH",
    // interpreters and runtimes
    "PYTHON*", "PERL5*", "PERLLIB", "PERLIO*", "RUBY*", "GEM_*", "NODE_*", "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "LUA_*", "TCL*", "OPENSSL_*", "SSL_CERT_*",
    // libraries the worker links that load plugins or open files named here
    "CUDA_INJECTION*", "CUDA_CACHE_PATH", "OMP_TOOL*", "NCCL_*_PLUGIN", "NCCL_*_FILE",
    // the launcher's
    "CUDA_VISIBLE_DEVICES", "FP8D_*"};

// True when `name` matches a pattern: "NAME" exactly, "PREFIX*" by prefix, "A*B" by prefix and
// suffix (kJobEnvNever's "NCCL_*_PLUGIN"; --job-env-allow takes only the first two forms).
bool MatchesEnvPattern(std::string_view pattern, std::string_view name);

// INVALID_ARGUMENT naming the flag unless each --job-env-allow entry is a variable name or
// PREFIX* and could admit at least one name kJobEnvNever does not refuse ("LD_*" or
// "LD_PRELOAD" could only be refused again, so they are configuration mistakes).
fp8::Status CheckJobEnvAllow(const std::vector<std::string>& operator_allow);

// OK when every key of job.env is a well-formed name on the built-in allowlist or in
// `operator_allow`, none is in kJobEnvNever, and the sizes are bounded; otherwise
// INVALID_ARGUMENT naming the variable ("job.env[LD_PRELOAD]: not allowed: ...").
fp8::Status ValidateJobEnv(const fp8d::v1::Job& job, const std::vector<std::string>& operator_allow);

}  // namespace fp8d::api
