// SPDX-License-Identifier: Apache-2.0
// fp8d's loggers: the default one ("fp8d", stderr) and the audit one ("audit", daemon/api's
// AuditLog), set up once in main.
//   - When stderr is the journal ($JOURNAL_STREAM names stderr's device and inode, as systemd
//     sets it for StandardError=journal), each line starts with the syslog priority of its level
//     as <N> (trace and debug 7, info 6, warn 4, error 3, critical 2), which journald reads
//     (SyslogLevelPrefix=, on by default) and strips: `journalctl -p warning` then works.
//   - Audit lines are written whatever --log-level says (the level filters the daemon's own
//     lines, never the record of who did what), to stderr beside the others, or with
//     --audit-log to a file of their own (appended, mode 0640, not inherited by workers).
#pragma once

#include <string>

#include <spdlog/common.h>

#include "common/status.h"

namespace fp8d::server {

// The default logger on stderr, at info, before the flags are read (their errors need it).
void InstallStderrLogger();

// --log-level on the default logger, and the audit logger on stderr or `audit_log`.
// FAILED_PRECONDITION naming --audit-log when the file cannot be opened.
fp8::Status ConfigureLoggers(const std::string& log_level, const std::string& audit_log);

// True when $JOURNAL_STREAM is "<dev>:<inode>" of the file `fd` is open on.
bool FdIsJournalStream(int fd);

// The syslog priority journald reads from a <N> prefix, for an spdlog level.
int SyslogPriority(spdlog::level::level_enum level);

}  // namespace fp8d::server
