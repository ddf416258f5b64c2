// SPDX-License-Identifier: Apache-2.0
// Authentication and authorization at the API edge (gRPC and HTTP alike). A caller is first
// described transport-neutrally (CallerInfo), then each configured source (one AuthPolicy class
// per source: bearer tokens, the mTLS client certificate, the local peer) is asked in turn who
// it is; the first source that recognizes the caller decides. The role check is one function,
// so every handler authorizes the same way.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/server_context.h>

#include "common/status.h"

namespace fp8d::api {

// Ordered: each role may do everything the previous one may.
enum class Role { kViewer = 1, kSubmitter = 2, kAdmin = 3 };

fp8::StatusOr<Role> ParseRole(std::string_view text);
const char* RoleName(Role role);

struct Principal {
  std::string name;  // recorded as Job.owner
  Role role = Role::kViewer;
  int64_t uid = -1;  // local uid its jobs run as; -1: not mapped (the default user's is used)
};

// What the transport knows about a caller.
struct CallerInfo {
  std::optional<std::string> bearer_token;  // from "authorization: Bearer <token>"
  bool authorization_malformed = false;     // an authorization header that is not Bearer
  // gRPC's peer form: "ipv4:127.0.0.1:5000", "ipv6:[::1]:5000", "fd:12" (a unix-socket
  // connection fp8d accepted itself, see UnixPeerTable), "unix:/path".
  std::string peer;
  std::string tls_common_name;  // CN of a client certificate the TLS layer verified
};

// Facts from gRPC's context: metadata, peer, and the auth context of the TLS handshake.
CallerInfo CallerFromGrpc(const grpc::ServerContextBase& context);
// Splits an "authorization" header value into CallerInfo's token fields.
void ParseAuthorizationHeader(std::string_view value, CallerInfo* caller);

class AuthPolicy {
 public:
  virtual ~AuthPolicy() = default;
  // The caller's principal; NOT_FOUND when this source has nothing to say about the caller
  // (the next source is asked); UNAUTHENTICATED when its credential is present but wrong.
  virtual fp8::StatusOr<Principal> Authenticate(const CallerInfo& caller) const = 0;
};

// One entry of the --auth-tokens file.
struct AuthEntry {
  std::string token_sha256;  // lowercase hex; "-" for a principal that only uses mTLS
  Principal principal;
};

// Lines "<sha256-hex|-> <principal> <viewer|submitter|admin> [uid|user]"; '#' comments.
// INVALID_ARGUMENT naming the file and line.
fp8::StatusOr<std::vector<AuthEntry>> LoadAuthEntries(const std::string& path);
std::string Sha256Hex(std::string_view data);

// Bearer tokens, compared by their SHA-256 (the file never holds a token). fp8d asks it first
// even with no tokens configured: a presented token (or a malformed authorization header) is
// then UNAUTHENTICATED ("no tokens are configured"), never ignored in favour of who the peer is.
class TokenAuthPolicy final : public AuthPolicy {
 public:
  explicit TokenAuthPolicy(const std::vector<AuthEntry>& entries);
  fp8::StatusOr<Principal> Authenticate(const CallerInfo& caller) const override;
  // Swaps in a whole new set (SIGHUP); a call sees either the old set or the new one.
  void Replace(const std::vector<AuthEntry>& entries);

 private:
  using Table = std::map<std::string, Principal>;
  mutable std::mutex mu_;
  std::shared_ptr<const Table> by_hash_;
};

// The verified client certificate's subject CN is the principal; its role and uid come from the
// auth entries of that name (a certificate whose CN has no entry is refused).
class MtlsAuthPolicy final : public AuthPolicy {
 public:
  explicit MtlsAuthPolicy(const std::vector<AuthEntry>& entries);
  fp8::StatusOr<Principal> Authenticate(const CallerInfo& caller) const override;
  // As TokenAuthPolicy::Replace.
  void Replace(const std::vector<AuthEntry>& entries);

 private:
  using Table = std::map<std::string, Principal>;
  mutable std::mutex mu_;
  std::shared_ptr<const Table> by_name_;
};

// Re-reads the --auth-tokens file (SIGHUP) into the given sources (either may be null). A file
// that does not load changes nothing and its error is returned: a typo must not lock everyone
// out. On success returns the number of entries now in force.
fp8::StatusOr<size_t> ReloadAuthEntries(const std::string& path, TokenAuthPolicy* tokens, MtlsAuthPolicy* mtls);

// uids of the unix-socket connections fp8d accepted itself (SO_PEERCRED), by fd; gRPC names such
// a connection's peer "fd:<n>".
class UnixPeerTable {
 public:
  void Set(int fd, uid_t uid);
  std::optional<uid_t> Get(int fd) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uid_t> uids_;
};

// Callers on this machine without a credential: a unix-socket peer is its SO_PEERCRED uid
// (root is admin, any other user a submitter named after its login); a loopback TCP peer is
// `default_user` (never root; its role is --loopback-role, viewer unless the operator says
// otherwise: any local user or process can open a loopback port, so it is no identity) when
// `loopback_default` is set (fp8d listens on loopback only: a port open to other machines
// demands credentials of everyone).
class LocalPeerAuthPolicy final : public AuthPolicy {
 public:
  LocalPeerAuthPolicy(std::shared_ptr<const UnixPeerTable> unix_peers, Principal default_user,
                      bool loopback_default = true);
  fp8::StatusOr<Principal> Authenticate(const CallerInfo& caller) const override;

 private:
  std::shared_ptr<const UnixPeerTable> unix_peers_;
  Principal default_user_;
  bool loopback_default_;
};

// Asks each source in order; the first answer other than NOT_FOUND wins. No answer at all is
// UNAUTHENTICATED.
class ChainAuthPolicy final : public AuthPolicy {
 public:
  explicit ChainAuthPolicy(std::vector<std::shared_ptr<const AuthPolicy>> sources);
  fp8::StatusOr<Principal> Authenticate(const CallerInfo& caller) const override;

 private:
  std::vector<std::shared_ptr<const AuthPolicy>> sources_;
};

// Admits every caller as an admin named "local": only for in-process tests.
class AllowLocalAuthPolicy final : public AuthPolicy {
 public:
  fp8::StatusOr<Principal> Authenticate(const CallerInfo&) const override {
    return Principal{"local", Role::kAdmin, -1};
  }
};

// True for methods that change nothing (viewer may call them).
bool IsReadOnlyMethod(std::string_view method);
// PERMISSION_DENIED unless the principal's role allows `method` ("CreateJob", ...). Ownership
// (a submitter cancelling only its own jobs) is checked where the job is known.
fp8::Status AuthorizeMethod(const Principal& principal, std::string_view method);
// PERMISSION_DENIED unless the principal owns the job or is an admin.
fp8::Status AuthorizeOwner(const Principal& principal, const std::string& owner,
                           std::string_view method, const std::string& job);

// The logger audit lines go to, and their pattern: the whole line is one JSON object, the
// time from spdlog, the fields from AuditLog. fp8d registers it (daemon/server/log_setup.h);
// without that, AuditLog makes one on stderr. Its level lets every line through.
inline constexpr const char* kAuditLoggerName = "audit";
inline constexpr const char* kAuditPattern = R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z",%v)";

// One JSON line on the "audit" logger: principal, method, job, result. Written whatever the
// daemon's log level.
void AuditLog(const Principal& principal, std::string_view method, std::string_view job,
              const fp8::Status& result);

}  // namespace fp8d::api
