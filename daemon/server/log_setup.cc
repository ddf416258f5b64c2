// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/log_setup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/api/auth_policy.h"

namespace fp8d::server {
namespace {

constexpr const char* kDaemonPattern = "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v";

// %*: "<N>" with the line's syslog priority.
class PriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string prefix = "<" + std::to_string(SyslogPriority(msg.level)) + ">";
    dest.append(prefix.data(), prefix.data() + prefix.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PriorityFlag>(); }
};

// `pattern`, behind a <N> prefix when the lines go to the journal.
std::unique_ptr<spdlog::formatter> Formatter(const std::string& pattern, bool journal) {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<PriorityFlag>('*').set_pattern(journal ? "%*" + pattern : pattern);
  return f;
}

// Appends each formatted line with one write() on an O_APPEND fd: lines of two processes on the
// same file never interleave, and a rotated (renamed) file is not written to after a reopen.
class AppendFdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit AppendFdSink(int fd) : fd_(fd) {}
  ~AppendFdSink() override { close(fd_); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk loses the line; logging it would recurse
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  const int fd_;
};

}  // namespace

int SyslogPriority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return 7;
    case spdlog::level::debug: return 7;
    case spdlog::level::info: return 6;
    case spdlog::level::warn: return 4;
    case spdlog::level::err: return 3;
    case spdlog::level::critical: return 2;
    case spdlog::level::off: return 6;
    case spdlog::level::n_levels: return 6;
  }
  return 6;
}

bool FdIsJournalStream(int fd) {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr || *stream == '\0') return false;
  char* end = nullptr;
  const unsigned long long dev = std::strtoull(stream, &end, 10);
  if (*end != ':') return false;
  const unsigned long long ino = std::strtoull(end + 1, &end, 10);
  if (*end != '\0') return false;
  struct stat st {};
  if (fstat(fd, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

void InstallStderrLogger() {
  auto logger = spdlog::stderr_color_mt("fp8d");
  logger->set_formatter(Formatter(kDaemonPattern, FdIsJournalStream(STDERR_FILENO)));
  spdlog::set_default_logger(logger);
}

fp8::Status ConfigureLoggers(const std::string& log_level, const std::string& audit_log) {
  // Before the audit logger exists: spdlog::set_level sets every registered logger.
  spdlog::set_level(spdlog::level::from_str(log_level));
  std::shared_ptr<spdlog::logger> audit;
  if (audit_log.empty()) {
    // A sink of its own (a formatter belongs to a sink), on the same console lock as fp8d's.
    audit = std::make_shared<spdlog::logger>(api::kAuditLoggerName,
                                             std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    audit->set_formatter(Formatter(api::kAuditPattern, FdIsJournalStream(STDERR_FILENO)));
  } else {
    const int fd = open(audit_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
      return fp8::FailedPreconditionError("--audit-log " + audit_log + ": " + std::strerror(errno));
    }
    audit = std::make_shared<spdlog::logger>(api::kAuditLoggerName, std::make_shared<AppendFdSink>(fd));
    audit->set_formatter(Formatter(api::kAuditPattern, false));
  }
  audit->set_level(spdlog::level::trace);
  if (spdlog::get(api::kAuditLoggerName) != nullptr) spdlog::drop(api::kAuditLoggerName);
  spdlog::register_logger(audit);
  return fp8::OkStatus();
}

}  // namespace fp8d::server
