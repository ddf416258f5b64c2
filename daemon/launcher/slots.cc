// SPDX-License-Identifier: Apache-2.0
#include "daemon/launcher/slots.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace fp8d::launcher {

namespace {

bool ExecutableInPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    if (::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<int> ParseNvidiaSmiList(const std::string& output) {
  std::vector<int> gpus;
  std::stringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    int index = -1;
    if (std::sscanf(line.c_str(), "GPU %d:", &index) == 1 && index >= 0) gpus.push_back(index);
  }
  return gpus;
}

std::vector<int> DetectGpusWithNvidiaSmi() {
  // Checked first so a machine without the driver does not print "not found" on every start.
  if (!ExecutableInPath("nvidia-smi")) return {};
  // "e": the pipe is O_CLOEXEC, so a worker started concurrently does not inherit it.
  std::FILE* pipe = ::popen("nvidia-smi -L 2>/dev/null", "re");
  if (pipe == nullptr) return {};
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  int rc = ::pclose(pipe);
  if (rc != 0) return {};  // driver present but not working: no GPUs to offer
  return ParseNvidiaSmiList(output);
}

std::string LocalHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::vector<Slot> ComputeSlots(const LocalLauncherOptions& options) {
  std::string node = options.node_name.empty() ? LocalHostname() : options.node_name;
  std::vector<int> gpus = options.gpus;
  if (gpus.empty() && options.detect_gpus) gpus = DetectGpusWithNvidiaSmi();
  std::vector<Slot> slots;
  if (!gpus.empty()) {
    for (int g : gpus) slots.push_back(Slot{node, g});
    return slots;
  }
  int cpus = options.cpu_slots;
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (cpus <= 0) cpus = 1;
  for (int i = 0; i < cpus; ++i) slots.push_back(Slot{node, -1});
  return slots;
}

}  // namespace fp8d::launcher
