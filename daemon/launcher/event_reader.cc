// SPDX-License-Identifier: Apache-2.0
#include "daemon/launcher/event_reader.h"

#include "daemon/launcher/attempt_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <google/protobuf/util/json_util.h>

namespace fp8d::launcher {

EventFileReader::EventFileReader(std::string path, int64_t offset)
    : path_(std::move(path)), read_offset_(offset) {}

EventFileReader::EventFileReader(std::string path, int64_t offset, UniqueFd fd)
    : path_(std::move(path)), fd_(std::move(fd)), read_offset_(offset) {}

fp8::Status EventFileReader::Open() {
  if (checked_) return fp8::OkStatus();
  if (fd_.get() < 0) {
    fp8::StatusOr<UniqueFd> fd = OpenAttemptFile(path_);
    if (!fd.ok()) return fp8::Status(fd.status().code(), "events file " + path_ + ": " + fd.status().message());
    fd_ = std::move(*fd);
  }
  struct stat st {};
  if (::fstat(fd_.get(), &st) == 0 && st.st_size < read_offset_) {
    fd_.reset();
    return fp8::DataLossError("events file " + path_ + " has " + std::to_string(st.st_size) +
                              " bytes, fewer than the saved offset " +
                              std::to_string(read_offset_));
  }
  checked_ = true;
  return fp8::OkStatus();
}

fp8::StatusOr<std::vector<EventLine>> EventFileReader::ReadAvailable() {
  FP8_RETURN_IF_ERROR(Open());
  std::vector<EventLine> lines;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::pread(fd_.get(), buf, sizeof(buf), read_offset_);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fp8::InternalError("reading events file " + path_ + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    // Offset of buf[0] in the file, used to give each line its end offset.
    int64_t base = read_offset_;
    read_offset_ += n;
    size_t start = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (buf[i] != '\n') continue;
      if (skipping_) {
        // The rest of an oversized line whose head was already reported.
        skipping_ = false;
        skipped_ = 0;
        start = i + 1;
        continue;
      }
      partial_.append(buf + start, i - start);
      start = i + 1;
      if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
      EventLine line;
      line.text = std::move(partial_);
      line.offset_after = base + static_cast<int64_t>(i) + 1;
      partial_.clear();
      lines.push_back(std::move(line));
    }
    size_t rest = static_cast<size_t>(n) - start;
    if (skipping_) {
      skipped_ += static_cast<int64_t>(rest);
    } else {
      partial_.append(buf + start, rest);
      if (partial_.size() > kMaxLineBytes) {
        EventLine line;
        line.text = partial_.substr(0, 256);
        line.oversized = true;
        // The line is consumed as far as it has been read; the remainder up to its '\n' is
        // dropped as it arrives.
        line.offset_after = read_offset_;
        lines.push_back(std::move(line));
        partial_.clear();
        skipping_ = true;
        skipped_ = 0;
      }
    }
  }
  return lines;
}

std::optional<EventLine> EventFileReader::TakeUnterminatedTail() {
  if (partial_.empty()) return std::nullopt;
  EventLine line;
  line.text = std::move(partial_);
  partial_.clear();
  line.offset_after = read_offset_;
  return line;
}

std::optional<fp8d::v1::WorkerEvent> ParseEventLine(const std::string& line) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  fp8d::v1::WorkerEvent ev;
  if (!google::protobuf::util::JsonStringToMessage(line, &ev, options).ok()) return std::nullopt;
  if (ev.payload_case() == fp8d::v1::WorkerEvent::PAYLOAD_NOT_SET) return std::nullopt;
  return ev;
}

std::string EventType(const fp8d::v1::WorkerEvent& event) {
  const google::protobuf::FieldDescriptor* field = event.GetReflection()->GetOneofFieldDescriptor(
      event, fp8d::v1::WorkerEvent::descriptor()->FindOneofByName("payload"));
  return field == nullptr ? "" : field->name();
}

std::optional<WorkerEvent> ToWorkerEvent(const std::string& job_id, int attempt, int rank,
                                         const EventLine& line) {
  if (!line.oversized && line.text.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  WorkerEvent ev;
  ev.job_id = job_id;
  ev.attempt = attempt;
  ev.rank = rank;
  ev.raw = line.text;
  ev.offset_after = line.offset_after;
  std::optional<fp8d::v1::WorkerEvent> parsed;
  if (!line.oversized) parsed = ParseEventLine(line.text);
  if (parsed) {
    ev.event = std::move(*parsed);
  } else {
    ev.garbage = true;
  }
  return ev;
}

}  // namespace fp8d::launcher
