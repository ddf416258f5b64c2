// SPDX-License-Identifier: Apache-2.0
// `fp8-worker calibrate --spec spec.json` (docs/design.md §4). The worker's
// main dispatches here with argv starting after the subcommand, e.g. {"--spec", "spec.json"}.
//
// Options:
//   --spec PATH        CalibrateSpec as JSON (or YAML: .yaml/.yml), required
//   --events PATH      append NDJSON events to PATH instead of stdout
//   --max-shards N     stop (exit 75, as if interrupted) after N shards; for restart tests
//
// Exit codes: 0 done; 64 invalid spec; 65 bad input data; 75 stopped/temporary (restartable,
// finished shards are kept); 70 internal error.
#pragma once

namespace fp8::calibrate {

int CalibrateMain(int argc, char** argv);

}  // namespace fp8::calibrate
