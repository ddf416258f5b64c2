// SPDX-License-Identifier: Apache-2.0
// Test-only crash points on the launch and preemption paths, as etcd's robustness tests use: with
// FP8D_FAILPOINT=<name> in fp8d's environment, the daemon _exits (no destructors, no flush,
// as a SIGKILL would leave it) the first time it reaches that point. They change nothing a
// job computes; without the variable they cost one string compare.
//
//   after_intent         the attempt's launch intent (STARTING + attempt record) is durable,
//                        no worker spawned yet
//   after_spawn          every rank is spawned, their pids not saved
//   after_pid_save       the pids are durable, the job not yet RUNNING
//   after_running_write  RUNNING is durable
//   after_preempt_intent a preemption's intent (attempt PREEMPTED) is durable, no SIGTERM sent yet
#pragma once

namespace fp8d::core {

void Failpoint(const char* name);

}  // namespace fp8d::core
