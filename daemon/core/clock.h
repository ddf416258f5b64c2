// SPDX-License-Identifier: Apache-2.0
// Injectable clock: the manager reads time only through this, so tests drive time by hand.
#pragma once

#include <chrono>
#include <cstdint>

namespace fp8d::core {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t NowMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace fp8d::core
