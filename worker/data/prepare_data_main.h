// SPDX-License-Identifier: Apache-2.0
// `fp8-worker prepare-data`: token shards from a text file, bytes (vocab 256) or a Hugging Face
// byte-level BPE tokenizer.
#pragma once

namespace fp8::data {

int PrepareDataMain(int argc, char** argv);

}  // namespace fp8::data
