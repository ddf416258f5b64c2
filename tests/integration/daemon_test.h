// SPDX-License-Identifier: Apache-2.0
// The fixture of the integration suites: one real fp8d in a temp dir, its log printed when a
// test fails.
#pragma once

#include <iostream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/integration/daemon_process.h"

namespace fp8d::itest {

class DaemonTest : public ::testing::Test {
 protected:
  void StartDaemon(DaemonOptions options = {}) {
    daemon_ = std::make_unique<Daemon>(tmp_.path() + "/data", options);
    fp8::Status st = daemon_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override {
    if (HasFailure() && daemon_ != nullptr) std::cerr << "---- fp8d log ----\n" << daemon_->Log();
    daemon_.reset();
  }
  fp8d::client::JobClient& client() { return daemon_->client(); }
  std::string Out(const std::string& name) { return tmp_.path() + "/out/" + name; }

  TempDir tmp_;
  std::unique_ptr<Daemon> daemon_;
};

}  // namespace fp8d::itest
