// SPDX-License-Identifier: Apache-2.0
// The node's inventory: which slots (GPUs, or CPU slots on a machine without GPUs) it offers.
#pragma once

#include <string>
#include <vector>

#include "daemon/launcher/launcher.h"

namespace fp8d::launcher {

// GPU indices from `nvidia-smi -L` ("GPU 0: ..." lines), or empty when it is missing or
// fails. Run-time discovery only: the daemon never links NVML or CUDA (docs/design.md §1).
std::vector<int> DetectGpusWithNvidiaSmi();

// Counts the "GPU <n>:" lines of `nvidia-smi -L` output.
std::vector<int> ParseNvidiaSmiList(const std::string& output);

std::string LocalHostname();

// Configured GPUs, else detected ones (if allowed), else CPU slots.
std::vector<Slot> ComputeSlots(const LocalLauncherOptions& options);

}  // namespace fp8d::launcher
