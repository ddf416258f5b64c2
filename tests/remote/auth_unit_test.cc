// SPDX-License-Identifier: Apache-2.0
// The pure parts of the remote API and isolation, in-process: the tokens file, each auth
// source and their chain, role and owner checks, run-as uids, path roots, the worker
// environment allowlist, and fp8ctl contexts. Job.env's allowlist: tests/security_principals.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/contexts.h"
#include "daemon/launcher/launcher.h"
#include "daemon/api/auth_policy.h"
#include "daemon/api/job_isolation.h"

namespace fp8d::api {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "fp8d-auth-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name) << text;
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

TEST(AuthEntries, ParsesLinesAndNamesTheBadOne) {
  TempDir dir;
  const std::string hash = Sha256Hex("secret");
  auto ok = LoadAuthEntries(dir.Write("t", "# c\n" + hash + " alice submitter 1234\n- bob viewer\n\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].principal.uid, 1234);
  EXPECT_EQ((*ok)[1].principal.role, Role::kViewer);
  auto bad = LoadAuthEntries(dir.Write("u", hash + " alice boss\n"));
  EXPECT_EQ(bad.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(":1: role boss"), std::string::npos) << bad.status().message();
  auto short_hash = LoadAuthEntries(dir.Write("v", "abc alice admin\n"));
  EXPECT_NE(short_hash.status().message().find("64 hex digits"), std::string::npos);
}

TEST(AuthSources, TokenMtlsLocalAndTheirChain) {
  std::vector<AuthEntry> entries = {{Sha256Hex("t-alice"), {"alice", Role::kSubmitter, 1001}},
                                    {"-", {"carol", Role::kViewer, -1}}};
  auto peers = std::make_shared<UnixPeerTable>();
  peers->Set(17, 0);
  ChainAuthPolicy chain({std::make_shared<TokenAuthPolicy>(entries), std::make_shared<MtlsAuthPolicy>(entries),
                         std::make_shared<LocalPeerAuthPolicy>(peers, Principal{"nobody", Role::kSubmitter, 65534})});
  CallerInfo c;
  c.peer = "ipv4:10.0.0.1:5";
  c.bearer_token = "t-alice";
  EXPECT_EQ(chain.Authenticate(c)->name, "alice");
  c.bearer_token = "wrong";
  EXPECT_EQ(chain.Authenticate(c).status().code(), fp8::StatusCode::kUnauthenticated);
  c.bearer_token.reset();
  EXPECT_EQ(chain.Authenticate(c).status().code(), fp8::StatusCode::kUnauthenticated);
  c.tls_common_name = "carol";
  EXPECT_EQ(chain.Authenticate(c)->role, Role::kViewer);
  c.tls_common_name = "mallory";
  EXPECT_EQ(chain.Authenticate(c).status().code(), fp8::StatusCode::kUnauthenticated);
  c.tls_common_name.clear();
  c.peer = "ipv4:127.0.0.1:5";
  EXPECT_EQ(chain.Authenticate(c)->name, "nobody");
  c.bearer_token = "wrong";  // checked on loopback too, not ignored for the local identity
  EXPECT_EQ(chain.Authenticate(c).status().code(), fp8::StatusCode::kUnauthenticated);
  c.bearer_token.reset();
  c.peer = "fd:17";
  EXPECT_EQ(chain.Authenticate(c)->role, Role::kAdmin);
  c.peer = "fd:18";  // not accepted by fp8d's unix listener
  EXPECT_EQ(chain.Authenticate(c).status().code(), fp8::StatusCode::kUnauthenticated);
  LocalPeerAuthPolicy exposed(peers, Principal{"nobody", Role::kSubmitter, 65534}, false);
  c.peer = "ipv4:127.0.0.1:5";
  EXPECT_EQ(exposed.Authenticate(c).status().code(), fp8::StatusCode::kNotFound);
  c.peer = "fd:17";
  EXPECT_EQ(exposed.Authenticate(c)->role, Role::kAdmin);
  CallerInfo basic;
  ParseAuthorizationHeader("Basic abc", &basic);
  EXPECT_EQ(TokenAuthPolicy(entries).Authenticate(basic).status().code(), fp8::StatusCode::kUnauthenticated);
}

// fp8d without --auth-tokens still asks an (empty) token source first: a presented token is
// refused, and loopback callers without one get the configured loopback role.
TEST(AuthSources, NoTokensConfiguredRefusesEveryPresentedToken) {
  auto peers = std::make_shared<UnixPeerTable>();
  peers->Set(17, 1001);
  ChainAuthPolicy chain({std::make_shared<TokenAuthPolicy>(std::vector<AuthEntry>{}),
                         std::make_shared<LocalPeerAuthPolicy>(peers, Principal{"nobody", Role::kViewer, 65534})});
  for (const char* peer : {"ipv4:127.0.0.1:5", "ipv6:[::1]:5", "fd:17"}) {
    CallerInfo c;
    c.peer = peer;
    c.bearer_token = "anything";
    const auto refused = chain.Authenticate(c);
    EXPECT_EQ(refused.status().code(), fp8::StatusCode::kUnauthenticated) << peer;
    EXPECT_NE(refused.status().message().find("no tokens are configured"), std::string::npos)
        << refused.status().message();
    c.bearer_token.reset();
    ParseAuthorizationHeader("Basic abc", &c);
    EXPECT_EQ(chain.Authenticate(c).status().code(), fp8::StatusCode::kUnauthenticated) << peer;
  }
  CallerInfo loopback;
  loopback.peer = "ipv4:127.0.0.1:5";
  EXPECT_EQ(chain.Authenticate(loopback)->role, Role::kViewer);
  EXPECT_EQ(AuthorizeMethod(*chain.Authenticate(loopback), "CreateJob").code(), fp8::StatusCode::kPermissionDenied);
  CallerInfo unix_peer;
  unix_peer.peer = "fd:17";
  EXPECT_EQ(chain.Authenticate(unix_peer)->uid, 1001);
}

TEST(AuthSources, ReloadSwapsTheWholeFileOrNothing) {
  TempDir dir;
  const std::string path = dir.Write("tokens", Sha256Hex("old") + " alice admin\n");
  auto entries = LoadAuthEntries(path);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  TokenAuthPolicy tokens(*entries);
  MtlsAuthPolicy mtls(*entries);
  auto with_token = [](const std::string& token) {
    CallerInfo c;
    c.bearer_token = token;
    return c;
  };
  CallerInfo cert;
  cert.tls_common_name = "bob";
  ASSERT_TRUE(tokens.Authenticate(with_token("old")).ok());
  EXPECT_EQ(mtls.Authenticate(cert).status().code(), fp8::StatusCode::kUnauthenticated);

  // A new file: the old token is gone, the new one and the new principal are in force.
  dir.Write("tokens", Sha256Hex("new") + " alice admin\n- bob viewer\n");
  auto n = ReloadAuthEntries(path, &tokens, &mtls);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(tokens.Authenticate(with_token("old")).status().code(), fp8::StatusCode::kUnauthenticated);
  auto alice = tokens.Authenticate(with_token("new"));
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->name, "alice");
  auto bob = mtls.Authenticate(cert);
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(bob->role, Role::kViewer);

  // A bad file (line 2) changes nothing and names the line; so does a missing one.
  dir.Write("tokens", Sha256Hex("third") + " carol admin\n" + Sha256Hex("x") + " dave boss\n");
  auto bad = ReloadAuthEntries(path, &tokens, &mtls);
  EXPECT_EQ(bad.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(":2:"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ReloadAuthEntries(dir.path() + "/missing", &tokens, nullptr).ok());
  EXPECT_TRUE(tokens.Authenticate(with_token("new")).ok());
  EXPECT_EQ(tokens.Authenticate(with_token("third")).status().code(), fp8::StatusCode::kUnauthenticated);
  EXPECT_TRUE(mtls.Authenticate(cert).ok());
}

TEST(AuthRoles, MethodsAndOwners) {
  Principal viewer{"v", Role::kViewer, -1}, alice{"alice", Role::kSubmitter, -1}, admin{"a", Role::kAdmin, -1};
  EXPECT_TRUE(AuthorizeMethod(viewer, "GetJob").ok());
  EXPECT_TRUE(AuthorizeMethod(viewer, "WatchJob").ok());
  EXPECT_EQ(AuthorizeMethod(viewer, "CreateJob").code(), fp8::StatusCode::kPermissionDenied);
  EXPECT_EQ(AuthorizeMethod(viewer, "DeleteJob").code(), fp8::StatusCode::kPermissionDenied);
  EXPECT_TRUE(AuthorizeMethod(alice, "CreateJob").ok());
  EXPECT_TRUE(AuthorizeOwner(alice, "alice", "CancelJob", "jobs/x").ok());
  EXPECT_EQ(AuthorizeOwner(alice, "bob", "CancelJob", "jobs/x").code(), fp8::StatusCode::kPermissionDenied);
  EXPECT_TRUE(AuthorizeOwner(admin, "bob", "CancelJob", "jobs/x").ok());
}

// An audit line is one JSON object whatever the caller put into the names and the message.
TEST(AuthAudit, LinesAreJsonWithTheCallersBytesEscaped) {
  // The audit logger writes to stderr (log_setup.cc may point it elsewhere): read fd 2 back.
  char path[] = "/tmp/fp8d-audit-XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(file, STDERR_FILENO);
  AuditLog(Principal{"al\"ice\n", Role::kSubmitter, -1}, "CreateJob", "jobs/7", fp8::OkStatus());
  AuditLog(Principal{"bob", Role::kViewer, -1}, "CancelJob", "jobs/\x01",
           fp8::Status(fp8::StatusCode::kPermissionDenied, "bad bytes \xff\xfe here"));
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  unlink(path);
  ASSERT_FALSE(second.empty()) << first;
  const auto a = nlohmann::json::parse(first), b = nlohmann::json::parse(second);
  EXPECT_TRUE(a.contains("time"));
  EXPECT_EQ(a["audit"], true);
  EXPECT_EQ(a["principal"], "al\"ice\n");
  EXPECT_EQ(a["role"], "submitter");
  EXPECT_EQ(a["method"], "CreateJob");
  EXPECT_EQ(a["job"], "jobs/7");
  EXPECT_EQ(a["result"], "OK");
  EXPECT_FALSE(a.contains("message"));
  EXPECT_EQ(b["job"], "jobs/\x01");
  EXPECT_EQ(b["result"], "PERMISSION_DENIED");
  EXPECT_EQ(b["message"], "bad bytes \xEF\xBF\xBD\xEF\xBF\xBD here");  // U+FFFD for each bad byte
}

TEST(Isolation, RunAsUidIsRootOnlyWhenAllowed) {
  IsolationOptions o;
  o.default_uid = 65534;
  EXPECT_EQ(*RunAsUid(o, {"x", Role::kAdmin, 0}), 0);  // isolation off: fp8d's own uid
  o.run_as_owner = true;
  const auto refused = RunAsUid(o, {"root", Role::kAdmin, 0});
  EXPECT_EQ(refused.status().code(), fp8::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("--allow-root-jobs"), std::string::npos) << refused.status().message();
  EXPECT_EQ(*RunAsUid(o, {"alice", Role::kSubmitter, 1001}), 1001);
  EXPECT_EQ(*RunAsUid(o, {"token", Role::kSubmitter, -1}), 65534);
  o.allow_root_jobs = true;
  EXPECT_EQ(*RunAsUid(o, {"root", Role::kAdmin, 0}), 0);
  EXPECT_EQ(*RunAsUid(o, {"alice", Role::kSubmitter, 1001}), 1001);
}

TEST(Isolation, PathsResolveUnderRoots) {
  TempDir dir;
  fs::create_directories(dir.path() + "/root/data");
  fs::create_symlink("/etc", dir.path() + "/root/escape");
  const std::vector<std::string> roots = {fs::canonical(dir.path() + "/root").string()};
  fp8d::v1::Job job;
  job.mutable_train()->mutable_data()->set_train(dir.path() + "/root/data/*.bin");
  job.mutable_train()->set_output_dir(dir.path() + "/root/out/new");
  EXPECT_TRUE(CheckJobPaths(job, roots, 0).ok()) << CheckJobPaths(job, roots, 0).ToString();
  job.mutable_train()->set_output_dir(dir.path() + "/root/escape/x");
  auto s = CheckJobPaths(job, roots, 0);
  EXPECT_EQ(s.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("job.train.output_dir"), std::string::npos) << s.message();
  job.mutable_train()->set_output_dir("relative/out");
  EXPECT_NE(CheckJobPaths(job, roots, 0).message().find("absolute"), std::string::npos);
  job.mutable_train()->set_output_dir(dir.path() + "/root/out/../../x");
  EXPECT_EQ(CheckJobPaths(job, roots, 0).code(), fp8::StatusCode::kInvalidArgument);
  fp8d::v1::Job cal;
  cal.mutable_calibrate()->set_input("/etc/shadow");
  EXPECT_NE(CheckJobPaths(cal, roots, 0).message().find("job.calibrate.input"), std::string::npos);
}

TEST(Isolation, WorkerEnvironmentAllowlist) {
  std::vector<std::string> raw = {"PATH=/bin", "AWS_SECRET_ACCESS_KEY=x", "LC_ALL=C", "NCCL_DEBUG=INFO",
                                  "FP8_TEST_MODE=hang", "HOME=/root", "OTHER=1", "MY_TOOL_X=1",
                                  "LD_LIBRARY_PATH=/opt/lib"};
  std::vector<char*> env;
  for (auto& e : raw) env.push_back(e.data());
  env.push_back(nullptr);
  auto out = launcher::AllowlistedEnvironment(env.data(), {"MY_TOOL_*"});
  EXPECT_EQ(out.count("AWS_SECRET_ACCESS_KEY"), 0u);
  EXPECT_EQ(out.count("OTHER"), 0u);
  EXPECT_EQ(out.at("LC_ALL"), "C");
  EXPECT_EQ(out.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(out.at("FP8_TEST_MODE"), "hang");
  EXPECT_EQ(out.at("PATH"), "/bin");
  EXPECT_EQ(out.at("MY_TOOL_X"), "1");
  EXPECT_EQ(out.at("LD_LIBRARY_PATH"), "/opt/lib");
  EXPECT_EQ(launcher::AllowlistedEnvironment(env.data(), {}).count("MY_TOOL_X"), 0u);
}

TEST(Contexts, ResolveAndUse) {
  TempDir dir;
  fs::create_directories(dir.path() + "/fp8d");
  dir.Write("tok", "from-file\n");
  dir.Write("fp8d/config.yaml",
            "current-context: a\ncontexts:\n"
            "  - {name: a, server: 'h:1', ca: /ca.pem, token-file: " + dir.path() + "/tok}\n"
            "  - {name: b, server: 'unix:/s'}\n");
  setenv("XDG_CONFIG_HOME", dir.path().c_str(), 1);
  unsetenv("FP8D_ADDR");
  unsetenv("FP8D_TOKEN");
  auto a = client::ResolveConnection({});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->address, "h:1");
  EXPECT_EQ(a->ca_file, "/ca.pem");
  EXPECT_EQ(a->token, "from-file");
  setenv("FP8D_TOKEN", "env-token", 1);
  auto b = client::ResolveConnection({"", "b", "/other.pem"});
  EXPECT_EQ(b->address, "unix:/s");
  EXPECT_EQ(b->ca_file, "/other.pem");
  EXPECT_EQ(b->token, "env-token");
  EXPECT_EQ(client::ResolveConnection({"", "zzz", ""}).status().code(), fp8::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client::UseContext(dir.path() + "/fp8d/config.yaml", "b").ok());
  EXPECT_EQ(client::ResolveConnection({})->address, "unix:/s");
  EXPECT_EQ(client::UseContext(dir.path() + "/fp8d/config.yaml", "c").code(), fp8::StatusCode::kNotFound);
  unsetenv("FP8D_TOKEN");
  unsetenv("XDG_CONFIG_HOME");
}

}  // namespace
}  // namespace fp8d::api
