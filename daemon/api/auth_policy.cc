// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/auth_policy.h"

#include <pwd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/security/auth_context.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace fp8d::api {

namespace {

fp8::Status Unauthenticated(std::string message) {
  return fp8::Status(fp8::StatusCode::kUnauthenticated, std::move(message));
}

fp8::Status PermissionDenied(std::string message) {
  return fp8::Status(fp8::StatusCode::kPermissionDenied, std::move(message));
}

fp8::StatusOr<int64_t> ParseUid(const std::string& text) {
  char* end = nullptr;
  const long long uid = std::strtoll(text.c_str(), &end, 10);
  if (!text.empty() && *end == '\0') {
    if (uid < 0) return fp8::InvalidArgumentError("uid " + text + ": must be >= 0");
    return static_cast<int64_t>(uid);
  }
  struct passwd* pw = getpwnam(text.c_str());
  if (pw == nullptr) return fp8::InvalidArgumentError("uid " + text + ": no such user");
  return static_cast<int64_t>(pw->pw_uid);
}

}  // namespace

fp8::StatusOr<Role> ParseRole(std::string_view text) {
  if (text == "viewer") return Role::kViewer;
  if (text == "submitter") return Role::kSubmitter;
  if (text == "admin") return Role::kAdmin;
  return fp8::InvalidArgumentError("role " + std::string(text) +
                                   ": expected viewer, submitter or admin");
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kSubmitter: return "submitter";
    case Role::kAdmin: return "admin";
  }
  return "viewer";
}

std::string Sha256Hex(std::string_view data) {
  // Fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up in its provider store on
  // every digest (0.7 µs against 0.2 µs here), and every bearer-token call hashes its token.
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &size, sha256 != nullptr ? sha256 : EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

fp8::StatusOr<std::vector<AuthEntry>> LoadAuthEntries(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fp8::InvalidArgumentError("--auth-tokens " + path + ": cannot be read");
  std::vector<AuthEntry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = "--auth-tokens " + path + ":" + std::to_string(number) + ": ";
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string word; fields >> word;) f.push_back(word);
    if (f.empty()) continue;
    if (f.size() < 3 || f.size() > 4) {
      return fp8::InvalidArgumentError(where + "expected '<sha256-hex|-> <principal> <role> [uid]'");
    }
    AuthEntry entry;
    entry.token_sha256 = f[0];
    if (f[0] != "-") {
      bool hex = f[0].size() == 64;
      for (char c : f[0]) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
      if (!hex) return fp8::InvalidArgumentError(where + "token hash must be 64 hex digits (sha256) or -");
      for (char& c : entry.token_sha256) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    entry.principal.name = f[1];
    auto role = ParseRole(f[2]);
    if (!role.ok()) return fp8::InvalidArgumentError(where + role.status().message());
    entry.principal.role = *role;
    if (f.size() == 4) {
      auto uid = ParseUid(f[3]);
      if (!uid.ok()) return fp8::InvalidArgumentError(where + uid.status().message());
      entry.principal.uid = *uid;
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

void ParseAuthorizationHeader(std::string_view value, CallerInfo* caller) {
  constexpr std::string_view kBearer = "Bearer ";
  if (value.size() > kBearer.size() && value.substr(0, kBearer.size()) == kBearer) {
    caller->bearer_token = std::string(value.substr(kBearer.size()));
  } else {
    caller->authorization_malformed = true;
  }
}

CallerInfo CallerFromGrpc(const grpc::ServerContextBase& context) {
  CallerInfo caller;
  caller.peer = context.peer();
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    ParseAuthorizationHeader(std::string_view(it->second.data(), it->second.size()), &caller);
  }
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const auto& cn : auth->FindPropertyValues("x509_common_name")) {
      caller.tls_common_name.assign(cn.data(), cn.size());
    }
  }
  return caller;
}

namespace {
std::shared_ptr<const std::map<std::string, Principal>> TokenTable(const std::vector<AuthEntry>& entries) {
  auto table = std::make_shared<std::map<std::string, Principal>>();
  for (const AuthEntry& e : entries) {
    if (e.token_sha256 != "-") (*table)[e.token_sha256] = e.principal;
  }
  return table;
}

std::shared_ptr<const std::map<std::string, Principal>> NameTable(const std::vector<AuthEntry>& entries) {
  auto table = std::make_shared<std::map<std::string, Principal>>();
  for (const AuthEntry& e : entries) (*table)[e.principal.name] = e.principal;
  return table;
}
}  // namespace

TokenAuthPolicy::TokenAuthPolicy(const std::vector<AuthEntry>& entries) : by_hash_(TokenTable(entries)) {}

void TokenAuthPolicy::Replace(const std::vector<AuthEntry>& entries) {
  auto table = TokenTable(entries);
  std::lock_guard<std::mutex> lock(mu_);
  by_hash_ = std::move(table);
}

fp8::StatusOr<Principal> TokenAuthPolicy::Authenticate(const CallerInfo& caller) const {
  if (caller.authorization_malformed) {
    return Unauthenticated("authorization: expected 'Bearer <token>'");
  }
  if (!caller.bearer_token) return fp8::NotFoundError("no bearer token");
  std::shared_ptr<const Table> table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table = by_hash_;
  }
  if (table->empty()) {
    return Unauthenticated("authorization: a bearer token was sent, but no tokens are configured "
                           "(--auth-tokens); send none to be known as the local peer");
  }
  // Looked up by hash: the time taken does not depend on how much of a token matched.
  auto it = table->find(Sha256Hex(*caller.bearer_token));
  if (it == table->end()) return Unauthenticated("authorization: unknown token");
  return it->second;
}

MtlsAuthPolicy::MtlsAuthPolicy(const std::vector<AuthEntry>& entries) : by_name_(NameTable(entries)) {}

void MtlsAuthPolicy::Replace(const std::vector<AuthEntry>& entries) {
  auto table = NameTable(entries);
  std::lock_guard<std::mutex> lock(mu_);
  by_name_ = std::move(table);
}

fp8::StatusOr<Principal> MtlsAuthPolicy::Authenticate(const CallerInfo& caller) const {
  if (caller.tls_common_name.empty()) return fp8::NotFoundError("no client certificate");
  std::shared_ptr<const Table> table;
  {
    std::lock_guard<std::mutex> lock(mu_);
    table = by_name_;
  }
  auto it = table->find(caller.tls_common_name);
  if (it == table->end()) {
    return Unauthenticated("client certificate CN=" + caller.tls_common_name +
                           " is not a principal in --auth-tokens");
  }
  return it->second;
}

fp8::StatusOr<size_t> ReloadAuthEntries(const std::string& path, TokenAuthPolicy* tokens, MtlsAuthPolicy* mtls) {
  auto loaded = LoadAuthEntries(path);
  if (!loaded.ok()) return loaded.status();
  if (tokens != nullptr) tokens->Replace(*loaded);
  if (mtls != nullptr) mtls->Replace(*loaded);
  return loaded->size();
}

void UnixPeerTable::Set(int fd, uid_t uid) {
  std::lock_guard<std::mutex> lock(mu_);
  uids_[fd] = uid;
}

std::optional<uid_t> UnixPeerTable::Get(int fd) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = uids_.find(fd);
  if (it == uids_.end()) return std::nullopt;
  return it->second;
}

LocalPeerAuthPolicy::LocalPeerAuthPolicy(std::shared_ptr<const UnixPeerTable> unix_peers,
                                         Principal default_user, bool loopback_default)
    : unix_peers_(std::move(unix_peers)), default_user_(std::move(default_user)),
      loopback_default_(loopback_default) {}

fp8::StatusOr<Principal> LocalPeerAuthPolicy::Authenticate(const CallerInfo& caller) const {
  const std::string& peer = caller.peer;
  if (peer.rfind("fd:", 0) == 0 && unix_peers_ != nullptr) {
    const int fd = std::atoi(peer.c_str() + 3);
    std::optional<uid_t> uid = unix_peers_->Get(fd);
    if (!uid) return Unauthenticated("unix socket peer without credentials");
    Principal p;
    p.uid = *uid;
    p.role = *uid == 0 ? Role::kAdmin : Role::kSubmitter;
    struct passwd* pw = getpwuid(*uid);
    p.name = pw != nullptr ? pw->pw_name : "uid:" + std::to_string(*uid);
    return p;
  }
  const bool loopback = peer.rfind("ipv4:127.", 0) == 0 || peer.rfind("ipv6:[::1]", 0) == 0 ||
                        peer.rfind("ipv6:[::ffff:127.", 0) == 0;
  if (loopback && loopback_default_) return default_user_;
  return fp8::NotFoundError("not a local peer");
}

ChainAuthPolicy::ChainAuthPolicy(std::vector<std::shared_ptr<const AuthPolicy>> sources)
    : sources_(std::move(sources)) {}

fp8::StatusOr<Principal> ChainAuthPolicy::Authenticate(const CallerInfo& caller) const {
  for (const auto& source : sources_) {
    fp8::StatusOr<Principal> p = source->Authenticate(caller);
    if (p.ok() || p.status().code() != fp8::StatusCode::kNotFound) return p;
  }
  return Unauthenticated("no credentials: send 'authorization: Bearer <token>' or a client certificate");
}

bool IsReadOnlyMethod(std::string_view method) {
  return method == "GetJob" || method == "ListJobs" || method == "WatchJob" ||
         method == "GetJobLogs" || method == "ListQueues" || method == "GetUsage" ||
         method == "GetServerInfo";
}

fp8::Status AuthorizeMethod(const Principal& principal, std::string_view method) {
  if (IsReadOnlyMethod(method) || principal.role >= Role::kSubmitter) return fp8::OkStatus();
  return PermissionDenied(std::string(method) + ": principal " + principal.name + " has role " +
                          RoleName(principal.role) + "; submitter or admin needed");
}

fp8::Status AuthorizeOwner(const Principal& principal, const std::string& owner,
                           std::string_view method, const std::string& job) {
  if (principal.role == Role::kAdmin || principal.name == owner) return fp8::OkStatus();
  return PermissionDenied(std::string(method) + " " + job + ": owned by " +
                          (owner.empty() ? std::string("nobody recorded") : owner) +
                          ", not by " + principal.name + " (only its owner or an admin may)");
}

void AuditLog(const Principal& principal, std::string_view method, std::string_view job,
              const fp8::Status& result) {
  static std::shared_ptr<spdlog::logger> audit = [] {
    auto existing = spdlog::get(kAuditLoggerName);
    if (existing != nullptr) return existing;
    // A sink of its own: a pattern set on a sink shared with the default logger would be
    // the default logger's too.
    auto logger = spdlog::stderr_color_mt(kAuditLoggerName);
    logger->set_pattern(kAuditPattern);
    logger->set_level(spdlog::level::trace);
    return logger;
  }();
  // Keys in the order nlohmann::json writes an object (sorted), as the lines always had. Only
  // the strings a caller may have chosen are escaped (the principal, the job, the message); bytes
  // that are not UTF-8 are replaced, not thrown over.
  const auto quoted = [](std::string_view s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const std::string json = fmt::format(
      R"({{"audit":true,"job":{},{}"method":{},"principal":{},"result":"{}","role":"{}"}})", quoted(job),
      result.ok() ? std::string() : "\"message\":" + quoted(result.message()) + ",", quoted(method),
      quoted(principal.name), fp8::StatusCodeName(result.code()), RoleName(principal.role));
  audit->info("{}", std::string_view(json).substr(1));  // the pattern supplies the '{'

}

}  // namespace fp8d::api
