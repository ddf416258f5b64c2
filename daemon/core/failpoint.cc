// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/failpoint.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fp8d::core {

void Failpoint(const char* name) {
  static const char* const armed = std::getenv("FP8D_FAILPOINT");
  if (armed == nullptr || std::strcmp(armed, name) != 0) return;
  std::fprintf(stderr, "fp8d: failpoint %s: exiting\n", name);
  std::fflush(stderr);
  ::_exit(99);
}

}  // namespace fp8d::core
