// SPDX-License-Identifier: Apache-2.0
// EventFileReader and ParseEventLine: complete lines only, exact offsets, garbage detection.
#include "daemon/launcher/event_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "tests/launcher/launcher_test_util.h"

namespace fp8d::launcher {
namespace {

class EventReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    path_ = dir_ + "/rank-0.events";
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    ::close(fd_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Append(const std::string& s) {
    ASSERT_EQ(::write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  std::vector<EventLine> Read(EventFileReader& r) {
    auto lines = r.ReadAvailable();
    EXPECT_TRUE(lines.ok()) << lines.status().ToString();
    return lines.ok() ? *lines : std::vector<EventLine>{};
  }

  std::string dir_, path_;
  int fd_ = -1;
};

TEST_F(EventReaderTest, PartialLineIsHeldUntilItsNewlineArrives) {
  EventFileReader reader(path_, 0);
  Append(R"({"type":"started"})" "\n" R"({"type":"prog)");
  auto lines = Read(reader);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, R"({"type":"started"})");
  EXPECT_EQ(lines[0].offset_after, 19);
  EXPECT_EQ(reader.consumed_offset(), 19);

  EXPECT_TRUE(Read(reader).empty());  // still no newline
  Append(R"(ress"})");
  EXPECT_TRUE(Read(reader).empty());
  Append("\n");
  lines = Read(reader);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, R"({"type":"progress"})");
  EXPECT_EQ(lines[0].offset_after, 19 + 20);
  EXPECT_EQ(reader.consumed_offset(), 39);
}

TEST_F(EventReaderTest, StartsAtTheSavedOffset) {
  Append("{\"type\":\"a\"}\n{\"type\":\"b\"}\n");
  EventFileReader reader(path_, 13);
  auto lines = Read(reader);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, R"({"type":"b"})");
  EXPECT_EQ(lines[0].offset_after, 26);
}

TEST_F(EventReaderTest, OffsetBeyondTheFileIsDataLoss) {
  Append("{\"type\":\"a\"}\n");
  EventFileReader reader(path_, 100);
  fp8::Status st = reader.Open();
  EXPECT_EQ(st.code(), fp8::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find(path_), std::string::npos);
}

TEST_F(EventReaderTest, MissingFileIsNotFoundNamingIt) {
  EventFileReader reader(dir_ + "/nope.events", 0);
  fp8::Status st = reader.Open();
  EXPECT_EQ(st.code(), fp8::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("nope.events"), std::string::npos);
}

TEST_F(EventReaderTest, CarriageReturnIsStrippedButCounted) {
  EventFileReader reader(path_, 0);
  Append("{\"type\":\"a\"}\r\n");
  auto lines = Read(reader);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, R"({"type":"a"})");
  EXPECT_EQ(lines[0].offset_after, 14);
}

TEST_F(EventReaderTest, UnterminatedTailIsHandedOutOnRequest) {
  EventFileReader reader(path_, 0);
  Append("{\"type\":\"a\"}\n{\"type\":\"b\"}");
  EXPECT_EQ(Read(reader).size(), 1u);
  auto tail = reader.TakeUnterminatedTail();
  ASSERT_TRUE(tail.has_value());
  EXPECT_EQ(tail->text, R"({"type":"b"})");
  EXPECT_EQ(tail->offset_after, 25);
  EXPECT_FALSE(reader.TakeUnterminatedTail().has_value());
}

TEST_F(EventReaderTest, OversizedLineIsReportedOnceAndSkipped) {
  EventFileReader reader(path_, 0);
  std::string big(EventFileReader::kMaxLineBytes + 10, 'x');
  Append(big);
  auto lines = Read(reader);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0].oversized);
  EXPECT_LE(lines[0].text.size(), 256u);
  Append("yyy\n{\"type\":\"after\"}\n");
  lines = Read(reader);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, R"({"type":"after"})");
  EXPECT_EQ(lines[0].offset_after, static_cast<int64_t>(big.size() + 4 + 17));
}

TEST(ParseEventLineTest, NeedsAJsonObjectNamingAnEvent) {
  std::optional<fp8d::v1::WorkerEvent> ev = ParseEventLine(R"({"time":1.5,"heartbeat":{}})");
  ASSERT_TRUE(ev.has_value());
  EXPECT_TRUE(ev->has_heartbeat());
  EXPECT_EQ(ev->time(), 1.5);
  EXPECT_EQ(EventType(*ev), "heartbeat");
  ev = ParseEventLine(R"({"progress":{"step":"7","loss":"NaN","fp8_amax_max":448}})");
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->progress().step(), 7);
  EXPECT_TRUE(std::isnan(ev->progress().loss()));
  EXPECT_TRUE(ev->progress().has_fp8_amax_max());
  EXPECT_FALSE(ev->progress().has_fp8_saturation_fraction());
  EXPECT_FALSE(ParseEventLine("not json").has_value());
  EXPECT_FALSE(ParseEventLine(R"({"step": 3})").has_value());          // no event in it
  EXPECT_FALSE(ParseEventLine(R"({"type":"heartbeat"})").has_value());  // the NDJSON of old
  EXPECT_FALSE(ParseEventLine(R"({"progress": 3})").has_value());
  EXPECT_FALSE(ParseEventLine(R"(["heartbeat"])").has_value());
  EXPECT_FALSE(ParseEventLine(R"({"heartbeat":{})").has_value());
  EXPECT_FALSE(ParseEventLine("").has_value());
}

TEST(ParseEventLineTest, SkipsWhatANewerWorkerAdds) {
  std::optional<fp8d::v1::WorkerEvent> ev =
      ParseEventLine(R"({"time":2,"host":"n1","error":{"class":"NEW_CLASS","message":"m","code":3}})");
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->error().class_(), fp8d::v1::WorkerEvent::ERROR_CLASS_UNSPECIFIED);
  EXPECT_EQ(ev->error().message(), "m");
  EXPECT_FALSE(ParseEventLine(R"({"time":2,"telemetry":{"x":1}})").has_value());  // no event we know
}

}  // namespace
}  // namespace fp8d::launcher
