// SPDX-License-Identifier: Apache-2.0
// `fp8-worker export` and `fp8-worker evaluate`: models in and out without a training run.
// argv starts after the subcommand; each returns the process exit code (sysexits).
#pragma once

namespace fp8::train {

// fp8-worker export --checkpoint DIR --out DIR --format hf [--max-shard-bytes N]
int ExportMain(int argc, char** argv);
// fp8-worker evaluate --model DIR [--recipe R] (--tokens 1,2,3 | --data GLOB [--seed S] [--first-batch B])
int EvaluateMain(int argc, char** argv);

}  // namespace fp8::train
