// SPDX-License-Identifier: Apache-2.0
// Incremental reader of a rank's NDJSON events file. The worker appends a line at a time; the
// launcher reads whatever has been appended since the last call and hands out only complete
// lines, so a line caught half-written is kept until its '\n' arrives. Offsets are byte
// offsets into the file, so a restarted controller can continue exactly after the last line
// it handled.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/launcher/launcher.h"
#include "daemon/launcher/beneath_dir.h"

namespace fp8d::launcher {

struct EventLine {
  std::string text;          // without the trailing '\n' (and '\r')
  int64_t offset_after = 0;  // byte offset just past the line's '\n'
  bool oversized = false;    // longer than the limit: `text` holds only its beginning
};

class EventFileReader {
 public:
  // A line longer than this is not an event (a worker printing a tensor to stdout, say); it is
  // reported as garbage with its head only, instead of growing the buffer without bound.
  static constexpr size_t kMaxLineBytes = 1 << 20;

  // `path` is <attempt dir>/rank-<r>.events; Open() reaches it through the attempt folder,
  // following no link (attempt_files.h).
  EventFileReader(std::string path, int64_t offset);
  // The same, for a file the launcher already holds open for reading (`fd`).
  EventFileReader(std::string path, int64_t offset, UniqueFd fd);
  EventFileReader(const EventFileReader&) = delete;
  EventFileReader& operator=(const EventFileReader&) = delete;

  // Opens the file (NOT_FOUND naming it if missing; DATA_LOSS if shorter than the offset;
  // PERMISSION_DENIED if it is a link or not a regular file).
  fp8::Status Open();
  // Complete lines appended since the last call, in file order.
  fp8::StatusOr<std::vector<EventLine>> ReadAvailable();
  // Once the writer is gone: an unterminated last line, if any, as a final line.
  std::optional<EventLine> TakeUnterminatedTail();

  // Offset just past the last complete line handed out.
  int64_t consumed_offset() const { return read_offset_ - static_cast<int64_t>(partial_.size()) - skipped_; }
  const std::string& path() const { return path_; }
  // The open file (-1 before Open succeeded).
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
  bool checked_ = false;  // Open() succeeded
  int64_t read_offset_;  // bytes of the file read so far
  std::string partial_;  // bytes read after the last '\n'
  int64_t skipped_ = 0;  // bytes of an oversized line dropped after its head was reported
  bool skipping_ = false;
};

// The event in a line, read with the proto JSON parser (unknown fields ignored, so a newer
// worker's additions pass); nullopt (garbage) for a line that is not JSON or names no event.
std::optional<fp8d::v1::WorkerEvent> ParseEventLine(const std::string& line);

// The event's name as the line spells it ("progress"); "" when it has none.
std::string EventType(const fp8d::v1::WorkerEvent& event);

// What a launcher delivers for one line of rank `rank`'s events file: the parsed event, or the
// line marked garbage; nullopt for a blank line, which carries nothing (its bytes are covered
// by the next line's offset).
std::optional<WorkerEvent> ToWorkerEvent(const std::string& job_id, int attempt, int rank,
                                         const EventLine& line);

}  // namespace fp8d::launcher
