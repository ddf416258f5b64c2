// `fp8-worker train --spec FILE [--resume-from DIR]` and `fp8-worker prepare-data --text FILE
// --out DIR`. argv starts after the subcommand. Return the process exit code (sysexits).
#pragma once

namespace fp8::train {
int TrainMain(int argc, char** argv);
int PrepareDataMain(int argc, char** argv);
}  // namespace fp8::train
