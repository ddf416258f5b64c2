// SPDX-License-Identifier: Apache-2.0
#include "worker/common/launch_env.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

extern char** environ;

namespace fp8::worker {
namespace {

// One launcher's names for the four numbers.
struct LauncherVars {
  const char* launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

// Innermost launcher first (launch_env.h says why).
constexpr LauncherVars kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

std::string Get(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

StatusOr<int> ParseInt(const std::string& name, const std::string& value, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < lo || v > hi)
    return InvalidArgumentError(name + ": must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                "] (got \"" + value + "\")");
  return static_cast<int>(v);
}

// One number: FP8D_<ours> if set, else the launcher's variable; `from` says which was read.
struct Number {
  int value = 0;
  std::string from;  // empty: neither was set
};

StatusOr<Number> Read(const EnvMap& env, const char* ours, const char* theirs, long lo) {
  Number n;
  for (const char* name : {ours, theirs}) {
    if (name == nullptr || Get(env, name).empty()) continue;
    FP8_ASSIGN_OR_RETURN(n.value, ParseInt(name, Get(env, name), lo, 1 << 20));
    n.from = name;
    return n;
  }
  return n;
}

std::string FileNamePart(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

// A name for this launch that every rank of it computes alike; empty if the launcher gives none.
std::string LaunchId(const EnvMap& env) {
  const std::string run = Get(env, "TORCHELASTIC_RUN_ID");
  if (!run.empty() && run != "none") {
    const std::string restart = Get(env, "TORCHELASTIC_RESTART_COUNT");
    return "torchrun-" + run + "-" + (restart.empty() ? "0" : restart);
  }
  if (const std::string ns = Get(env, "PMIX_NAMESPACE"); !ns.empty()) return "pmix-" + ns;
  const std::string job = Get(env, "SLURM_JOB_ID"), step = Get(env, "SLURM_STEP_ID");
  if (!job.empty() && !step.empty()) return "slurm-" + job + "." + step;
  return "";
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

StatusOr<RankPlacement> ResolveRankPlacement(const EnvMap& env, const LaunchContext& context) {
  const LauncherVars* theirs = nullptr;
  for (const LauncherVars& l : kLaunchers) {
    if (!Get(env, l.rank).empty()) {
      theirs = &l;
      break;
    }
  }
  auto var = [&](const char* LauncherVars::*member) { return theirs ? theirs->*member : nullptr; };
  FP8_ASSIGN_OR_RETURN(const Number rank, Read(env, "FP8D_RANK", var(&LauncherVars::rank), 0));
  FP8_ASSIGN_OR_RETURN(const Number world, Read(env, "FP8D_WORLD_SIZE", var(&LauncherVars::world_size), 1));
  FP8_ASSIGN_OR_RETURN(const Number local_rank, Read(env, "FP8D_LOCAL_RANK", var(&LauncherVars::local_rank), 0));
  FP8_ASSIGN_OR_RETURN(Number local_world,
                       Read(env, "FP8D_LOCAL_WORLD_SIZE", var(&LauncherVars::local_world_size), 1));

  RankPlacement p;
  p.launcher = rank.from == "FP8D_RANK" ? "fp8d" : theirs ? theirs->launcher : "";
  p.rank = rank.value;
  p.world_size = world.from.empty() ? 1 : world.value;
  const std::string world_name = world.from.empty() ? "FP8D_WORLD_SIZE" : world.from;
  if (p.rank >= p.world_size)
    return InvalidArgumentError((rank.from.empty() ? "FP8D_RANK" : rank.from) + ": must be < " + world_name + " (" +
                                std::to_string(p.world_size) + "), got " + std::to_string(p.rank));
  if (!local_world.from.empty()) {
    p.local_world_size = local_world.value;
  } else if (const std::string nodes = Get(env, "SLURM_STEP_NUM_NODES").empty() ? Get(env, "SLURM_NNODES")
                                                                                 : Get(env, "SLURM_STEP_NUM_NODES");
             theirs != nullptr && std::string(theirs->launcher) == "slurm" && !nodes.empty()) {
    FP8_ASSIGN_OR_RETURN(const int n, ParseInt("SLURM_STEP_NUM_NODES", nodes, 1, 1 << 20));
    p.local_world_size = (p.world_size + n - 1) / n;
  } else {
    p.local_world_size = p.world_size;  // no word on nodes: all ranks here (never oversubscribes)
  }
  const std::string local_world_name = local_world.from.empty() ? "FP8D_LOCAL_WORLD_SIZE" : local_world.from;
  if (p.local_world_size > p.world_size)
    return InvalidArgumentError(local_world_name + ": must be <= " + world_name + " (" + std::to_string(p.world_size) +
                                "), got " + std::to_string(p.local_world_size));
  p.local_rank = local_rank.from.empty() ? p.rank % p.local_world_size : local_rank.value;
  if (p.local_rank >= p.local_world_size)
    return InvalidArgumentError(local_rank.from + ": must be < " + local_world_name + " (" +
                                std::to_string(p.local_world_size) + "), got " + std::to_string(p.local_rank));

  p.rendezvous_dir = Get(env, "FP8D_RENDEZVOUS_DIR");
  if (!p.rendezvous_dir.empty() || p.world_size == 1) return p;
  // Several ranks and no folder given: derive one on this node's disk.
  const std::string addr = Get(env, "MASTER_ADDR"), port = Get(env, "MASTER_PORT");
  if (addr.empty() != port.empty())
    return InvalidArgumentError(std::string(addr.empty() ? "MASTER_ADDR" : "MASTER_PORT") + ": required with " +
                                (addr.empty() ? "MASTER_PORT" : "MASTER_ADDR"));
  const std::string id = LaunchId(env);
  if (addr.empty() && id.empty())
    return InvalidArgumentError(world_name + ": " + std::to_string(p.world_size) +
                                " ranks need a rendezvous: set FP8D_RENDEZVOUS_DIR (a folder every rank reaches), or "
                                "MASTER_ADDR and MASTER_PORT as torchrun does");
  if (p.local_world_size < p.world_size)
    return InvalidArgumentError("FP8D_RENDEZVOUS_DIR: required for ranks on several nodes (" + local_world_name + " " +
                                std::to_string(p.local_world_size) + " < " + world_name + " " +
                                std::to_string(p.world_size) +
                                "): a folder on a file system every node shares");
  std::string name = addr.empty() ? "" : FileNamePart(addr) + "_" + FileNamePart(port) + "_";
  name += id.empty() ? "ppid-" + std::to_string(context.parent_pid) : FileNamePart(id);
  p.rendezvous_dir = (std::filesystem::path(context.temp_dir) / "fp8d-rendezvous" / name).string();
  p.derived_rendezvous = true;
  return p;
}

StatusOr<int> CpuThreadCount(const EnvMap& env, int cores, int local_world_size) {
  if (const std::string v = Get(env, "FP8_NUM_THREADS"); !v.empty()) return ParseInt("FP8_NUM_THREADS", v, 1, 1024);
  if (const std::string v = Get(env, "OMP_NUM_THREADS"); !v.empty())
    return ParseInt("OMP_NUM_THREADS", v.substr(0, v.find(',')), 1, 1024);
  return std::max(1, cores / std::max(1, local_world_size));
}

Status AdoptLaunchEnvironment() {
  EnvMap env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::error_code ec;
  LaunchContext context{.parent_pid = static_cast<long>(::getppid()),
                        .temp_dir = std::filesystem::temp_directory_path(ec).string()};
  if (ec) context.temp_dir = "/tmp";
  FP8_ASSIGN_OR_RETURN(const RankPlacement p, ResolveRankPlacement(env, context));
  FP8_ASSIGN_OR_RETURN(const int threads, CpuThreadCount(env, UsableCores(), p.local_world_size));
  ::setenv("FP8D_RANK", std::to_string(p.rank).c_str(), 1);
  ::setenv("FP8D_WORLD_SIZE", std::to_string(p.world_size).c_str(), 1);
  ::setenv("FP8D_LOCAL_RANK", std::to_string(p.local_rank).c_str(), 1);
  ::setenv("FP8D_LOCAL_WORLD_SIZE", std::to_string(p.local_world_size).c_str(), 1);
  if (!p.rendezvous_dir.empty()) ::setenv("FP8D_RENDEZVOUS_DIR", p.rendezvous_dir.c_str(), 1);
  ::setenv("FP8_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (p.launcher != "fp8d" && p.world_size > 1)
    std::fprintf(stderr, "fp8-worker: rank %d/%d (local %d/%d) from %s's variables, rendezvous in %s%s, %d CPU threads\n",
                 p.rank, p.world_size, p.local_rank, p.local_world_size, p.launcher.c_str(), p.rendezvous_dir.c_str(),
                 p.derived_rendezvous ? " (derived)" : "", threads);
  return OkStatus();
}

}  // namespace fp8::worker
