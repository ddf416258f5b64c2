// SPDX-License-Identifier: Apache-2.0
#include <cmath>
#include <cstdio>
#include <string>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "worker/common/events.h"

namespace fp8::worker {
namespace {

WorkerEvent Parse(const std::string& line) {
  WorkerEvent ev;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &ev).ok()) << line;
  return ev;
}

// Everything written to `f` since it was opened.
std::string Contents(std::FILE* f) {
  std::rewind(f);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  return out;
}

TEST(WorkerEvents, ALineIsTheEventAsProtoJson) {
  WorkerEvent started = StartedEvent(1, 2, 4242, 30);
  started.set_time(12.5);
  const std::string line = EventLine(started);
  EXPECT_EQ(line, R"({"time":12.5,"started":{"rank":1,"world_size":2,"pid":"4242","step":"30"}})");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(Parse(line), started));
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(WorkerEvents, BuildersFillTheirPayload) {
  EXPECT_EQ(CheckpointEvent(40, "/c/step-40", "fnv:1").checkpoint().path(), "/c/step-40");
  EXPECT_EQ(MetricEvent("eval_loss", 3.5, 10).metric().value(), 3.5);
  EXPECT_EQ(ErrorEvent(WorkerEvent::NUMERIC, "loss is nan").error().class_(), WorkerEvent::NUMERIC);
  const WorkerEvent done = DoneEvent({{"final_loss", NAN}, {"steps", 20}, {"interrupted", true}});
  const auto& fields = done.done().result().fields();
  EXPECT_EQ(fields.at("steps").number_value(), 20);
  EXPECT_TRUE(fields.at("interrupted").bool_value());
  EXPECT_TRUE(fields.at("final_loss").has_null_value());  // JSON has no NaN
}

TEST(WorkerEvents, NanLossSurvivesTheLine) {
  WorkerEvent ev;
  ev.mutable_progress()->set_loss(NAN);
  const std::string line = EventLine(ev);
  EXPECT_NE(line.find(R"("loss":"NaN")"), std::string::npos) << line;
  EXPECT_TRUE(std::isnan(Parse(line).progress().loss()));
}

}  // namespace
}  // namespace fp8::worker
