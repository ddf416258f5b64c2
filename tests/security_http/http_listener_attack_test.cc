// SPDX-License-Identifier: Apache-2.0
// The HTTP listener of a real fp8d under attack: idle and trickling TCP connections and silent
// TLS connections must not keep /healthz, /readyz and /metrics from answering (within 1 s,
// measured and printed), the per-peer cap answers the 17th connection 503, HEAD sends no body,
// every malformed request gets a status line, and with --tls-client-ca the probes answer a
// caller without a certificate while every other route refuses it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tests/integration/daemon_process.h"

namespace fp8d::itest {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kProbeBound = 1000ms;  // the answer a probe must get while attackers hold connections

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A TCP connection to 127.0.0.1:port from `source` (any 127/8 address: the per-peer cap is by
// address, so attackers and the probe can be told apart on one machine).
Fd Connect(int port, const char* source = "127.0.0.1") {
  Fd fd(socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) return Fd();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) return Fd();
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Everything the server sends until it closes, or until `timeout`.
std::string ReadUntilClose(int fd, std::chrono::milliseconds timeout, bool* closed = nullptr) {
  std::string out;
  const auto end = Clock::now() + timeout;
  if (closed != nullptr) *closed = false;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    char buf[8192];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed != nullptr) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

struct Exchange {
  std::string response;
  std::chrono::milliseconds elapsed{0};
};

// One plaintext request; `half_close` ends the client's side after it.
Exchange Http(int port, std::string_view request, bool half_close = false,
              std::chrono::milliseconds timeout = 5000ms) {
  const auto start = Clock::now();
  Fd fd = Connect(port);
  Exchange ex;
  if (fd.get() < 0 || !SendAll(fd.get(), request)) return ex;
  if (half_close) shutdown(fd.get(), SHUT_WR);
  ex.response = ReadUntilClose(fd.get(), timeout);
  ex.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return ex;
}

std::string Get(std::string_view path, std::string_view method = "GET") {
  return std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

int StatusOf(const std::string& response) {
  std::smatch m;
  if (!std::regex_search(response, m, std::regex("^HTTP/1\\.[01] (\\d{3}) "))) return 0;
  return std::stoi(m[1]);
}

std::string HeaderOf(const std::string& response, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(response, m, std::regex("\r\n" + name + ": ([^\r]*)\r\n", std::regex::icase))) return "";
  return m[1];
}

std::string BodyOf(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

// A CA, a server certificate for localhost/127.0.0.1 and a client certificate (CN=alice), made
// by openssl as an operator would.
struct Pki {
  std::string ca, server_crt, server_key, client_crt, client_key;
};

Pki MakePki(const std::string& dir) {
  auto sh = [](const std::vector<std::string>& argv) {
    ProcessResult r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 0) << argv[1] << ": " << r.err;
  };
  const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"};
  auto req = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
    head.insert(head.end(), ec.begin(), ec.end());
    head.insert(head.end(), tail.begin(), tail.end());
    sh(head);
  };
  req({"/usr/bin/openssl", "req", "-x509"}, {"-keyout", dir + "/ca.key", "-out", dir + "/ca.crt", "-days", "2", "-subj", "/CN=ca"});
  for (const auto& [name, cn, ext] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"},
           {"alice", "alice", "extendedKeyUsage=clientAuth\n"}}) {
    req({"/usr/bin/openssl", "req"}, {"-keyout", dir + "/" + name + ".key", "-out", dir + "/" + name + ".csr", "-subj", "/CN=" + cn});
    std::ofstream(dir + "/" + name + ".ext") << ext;
    sh({"/usr/bin/openssl", "x509", "-req", "-in", dir + "/" + name + ".csr", "-CA", dir + "/ca.crt", "-CAkey",
        dir + "/ca.key", "-CAcreateserial", "-out", dir + "/" + name + ".crt", "-days", "2", "-extfile",
        dir + "/" + name + ".ext"});
  }
  return {dir + "/ca.crt", dir + "/server.crt", dir + "/server.key", dir + "/alice.crt", dir + "/alice.key"};
}

struct TlsExchange {
  bool handshake = false;
  std::string response;
  std::chrono::milliseconds elapsed{0};
};

// One HTTPS request with OpenSSL, trusting `ca`; with a client certificate when `cert` is set.
TlsExchange Https(int port, const Pki& pki, std::string_view request, bool client_cert) {
  TlsExchange ex;
  const auto start = Clock::now();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx, pki.ca.c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (client_cert) {
    SSL_CTX_use_certificate_chain_file(ctx, pki.client_crt.c_str());
    SSL_CTX_use_PrivateKey_file(ctx, pki.client_key.c_str(), SSL_FILETYPE_PEM);
  }
  Fd fd = Connect(port);
  timeval tv{5, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd.get());
  SSL_set_tlsext_host_name(ssl, "localhost");
  SSL_set1_host(ssl, "localhost");
  if (fd.get() >= 0 && SSL_connect(ssl) == 1) {
    ex.handshake = true;
    SSL_write(ssl, request.data(), static_cast<int>(request.size()));
    char buf[8192];
    int n = 0;
    while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0) ex.response.append(buf, static_cast<size_t>(n));
  }
  ex.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return ex;
}

class HttpListenerAttack : public ::testing::Test {
 protected:
  // fp8d with --http-listen on loopback plus `extra`. With `pki` (HTTPS): gRPC on a unix socket,
  // so the harness's plaintext client reaches it while the TLS flags apply to HTTP.
  void StartDaemon(std::vector<std::string> extra = {}, const Pki* pki = nullptr) {
    DaemonOptions options;
    options.extra_args = {"--http-listen", "127.0.0.1:0"};
    options.extra_args.insert(options.extra_args.end(), extra.begin(), extra.end());
    if (pki != nullptr) options.listen = "unix:" + dir_.path() + "/fp8d.sock";
    daemon_ = std::make_unique<Daemon>(dir_.path() + "/data", options);
    ASSERT_TRUE(daemon_->Start().ok()) << daemon_->Log();
    port_ = HttpPort(*daemon_);
    ASSERT_GT(port_, 0) << daemon_->Log();
    ASSERT_TRUE(PollUntil([&] {
      const std::string response = pki != nullptr ? Https(port_, *pki, Get("/readyz"), false).response
                                                  : Http(port_, Get("/readyz")).response;
      return StatusOf(response) == 200;
    }, 30s)) << daemon_->Log();
  }

  // /healthz, /readyz and /metrics answer 200 within the bound; prints how long each took.
  void ExpectProbesAnswer(const std::string& while_what) {
    for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
      const Exchange ex = Http(port_, Get(path), false, 3000ms);
      std::cout << path << " answered " << StatusOf(ex.response) << " in " << ex.elapsed.count() << " ms "
                << while_what << "\n";
      EXPECT_EQ(StatusOf(ex.response), 200) << path << " " << while_what;
      EXPECT_LT(ex.elapsed, kProbeBound) << path << " " << while_what;
    }
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  int port_ = 0;
};

TEST_F(HttpListenerAttack, IdleConnectionsDoNotStarveTheProbes) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::vector<Fd> idle;
  for (int i = 0; i < 2; ++i) idle.push_back(Connect(port_, "127.0.0.2"));
  ExpectProbesAnswer("with 2 idle connections open");
  // From two more addresses, each under the per-peer cap, so all 20 stay open.
  for (int i = 2; i < 20; ++i) idle.push_back(Connect(port_, i < 11 ? "127.0.0.3" : "127.0.0.6"));
  ExpectProbesAnswer("with 20 idle connections open");
  // Still open: none of them was answered or closed in the meantime.
  for (const Fd& fd : idle) {
    ASSERT_GE(fd.get(), 0);
  }
  bool closed = false;
  ReadUntilClose(idle[0].get(), 10ms, &closed);
  EXPECT_FALSE(closed) << "the idle connections must still be open while the probes are asked";
}

TEST_F(HttpListenerAttack, SixteenConnectionsPerPeerAndTheSeventeenthIsAnswered503) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  std::vector<Fd> held;
  for (int i = 0; i < 16; ++i) held.push_back(Connect(port_, "127.0.0.4"));
  Fd extra = Connect(port_, "127.0.0.4");
  ASSERT_GE(extra.get(), 0);
  bool closed = false;
  const auto start = Clock::now();
  const std::string response = ReadUntilClose(extra.get(), 3000ms, &closed);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  std::cout << "17th connection from one address: status " << StatusOf(response) << " after " << ms << " ms\n";
  EXPECT_EQ(StatusOf(response), 503) << response;
  EXPECT_TRUE(closed);
  ExpectProbesAnswer("with one address at its 16 connections");
}

TEST_F(HttpListenerAttack, ATricklingRequestIsCutOffAtTheDeadline) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  // One byte of header every 300 ms never finishes a request: the deadline from accept (10 s)
  // must end it although bytes keep arriving.
  Fd fd = Connect(port_, "127.0.0.5");
  const auto start = Clock::now();
  const std::string header = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(200, 'a');
  bool closed = false;
  for (size_t i = 0; i < header.size() && Clock::now() - start < 20s; ++i) {
    if (!SendAll(fd.get(), header.substr(i, 1))) {
      closed = true;
      break;
    }
    ReadUntilClose(fd.get(), 300ms, &closed);
    if (closed) break;
  }
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count();
  std::cout << "trickling connection closed: " << closed << " after " << s << " s\n";
  EXPECT_TRUE(closed);
  EXPECT_LE(s, 13);
}

TEST_F(HttpListenerAttack, SilentTlsConnectionsDoNotStarveTheProbes) {
  const Pki pki = MakePki(dir_.path());
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tls-cert", pki.server_crt, "--tls-key", pki.server_key}, &pki));
  std::vector<Fd> silent;
  for (int i = 0; i < 2; ++i) silent.push_back(Connect(port_, "127.0.0.2"));
  for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
    const TlsExchange ex = Https(port_, pki, Get(path), false);
    std::cout << "https " << path << " answered " << StatusOf(ex.response) << " in " << ex.elapsed.count()
              << " ms with 2 silent TLS connections open\n";
    EXPECT_TRUE(ex.handshake);
    EXPECT_EQ(StatusOf(ex.response), 200) << path;
    EXPECT_LT(ex.elapsed, kProbeBound) << path;
  }
}

TEST_F(HttpListenerAttack, HeadSendsTheHeadersOfGetWithoutABody) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  for (const char* path : {"/healthz", "/readyz", "/metrics", "/v1/jobs", "/v1/jobs/nope"}) {
    const std::string get = Http(port_, Get(path)).response;
    const std::string head = Http(port_, Get(path, "HEAD")).response;
    EXPECT_EQ(StatusOf(head), StatusOf(get)) << path;
    EXPECT_FALSE(HeaderOf(head, "Content-Length").empty()) << path << ":\n" << head;
    if (std::string_view(path) != "/metrics") {  // the metrics change between two scrapes
      EXPECT_EQ(HeaderOf(head, "Content-Length"), HeaderOf(get, "Content-Length")) << path;
    }
    EXPECT_EQ(BodyOf(head), "") << path;
    EXPECT_NE(BodyOf(get), "") << path;
  }
}

TEST_F(HttpListenerAttack, EveryMalformedRequestGetsAStatusLine) {
  ASSERT_NO_FATAL_FAILURE(StartDaemon());
  struct Case {
    std::string name, request;
    int status;
    bool half_close = false;
  };
  const std::vector<Case> cases = {
      {"not HTTP", "GARBAGE\r\n\r\n", 400},
      {"method only", "GET\r\n\r\n", 400},
      {"bad method token", "G@T /healthz HTTP/1.1\r\n\r\n", 400},
      {"control byte in target", "GET /\x7f HTTP/1.1\r\n\r\n", 400},
      // Quoted into an error message, such bytes made JSON's dump() throw and fp8d abort.
      {"non-ASCII job name", "GET /v1/jobs/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"non-ASCII path", "GET /h\x9b\x9e HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"version garbage", "GET /healthz HTTP/x.y\r\n\r\n", 400},
      {"trailing junk after version", "GET /healthz HTTP/1.1 junk\r\n\r\n", 400},
      // Beast reads only HTTP/1.0 and HTTP/1.1; any other version is malformed to it.
      {"HTTP/2.0 on HTTP/1", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 400},
      {"HTTP/0.9-like version", "GET /healthz HTTP/0.9\r\nHost: x\r\n\r\n", 400},
      {"header without colon", "GET /healthz HTTP/1.1\r\nHost x\r\n\r\n", 400},
      {"control byte in field name", "GET /healthz HTTP/1.1\r\nX\x01: y\r\n\r\n", 400},
      {"control byte in field value", "GET /healthz HTTP/1.1\r\nX: \x01\r\n\r\n", 400},
      {"bare LF line endings", "GET /healthz HTTP/1.1\nHost: x\n\n", 400},
      {"Content-Length not a number", "GET /healthz HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400},
      {"two Content-Lengths", "GET /healthz HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
      {"bad chunk size", "POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n", 400},
      {"header larger than 8 KiB", "GET /healthz HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n", 431},
      {"body larger than 64 KiB",
       "POST /v1/jobs HTTP/1.1\r\nContent-Length: 70000\r\n\r\n" + std::string(70000, 'a'), 413},
      {"cut short (client closed mid-header)", "GET /healthz HTTP/1.1\r\nHost: x\r\n", 400, true},
      {"cut short (body missing)", "POST /v1/jobs HTTP/1.1\r\nContent-Length: 10\r\n\r\nab", 400, true},
      {"unknown method on a probe", "FOO /healthz HTTP/1.1\r\n\r\n", 405},
      {"POST to a probe", "POST /readyz HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405},
  };
  int answered = 0;
  for (const Case& c : cases) {
    const Exchange ex = Http(port_, c.request, c.half_close);
    const int status = StatusOf(ex.response);
    std::cout << c.name << ": " << (ex.response.empty() ? "(closed without a status line)" : ex.response.substr(0, ex.response.find('\r')))
              << "\n";
    EXPECT_EQ(status, c.status) << c.name << ":\n" << ex.response;
    EXPECT_FALSE(BodyOf(ex.response).empty()) << c.name;
    if (status == 405) {
      EXPECT_EQ(HeaderOf(ex.response, "Allow"), "GET, HEAD") << c.name;
    }
    if (status != 0) ++answered;
  }
  std::cout << answered << " of " << cases.size() << " malformed requests got a status line\n";
  EXPECT_EQ(answered, static_cast<int>(cases.size()));
  ExpectProbesAnswer("after the malformed requests");
}

TEST_F(HttpListenerAttack, WithAClientCaOnlyTheProbesAnswerWithoutACertificate) {
  const Pki pki = MakePki(dir_.path());
  std::ofstream(dir_.path() + "/tokens") << "- alice submitter\n";
  ASSERT_NO_FATAL_FAILURE(StartDaemon({"--tls-cert", pki.server_crt, "--tls-key", pki.server_key, "--tls-client-ca", pki.ca,
               "--auth-tokens", dir_.path() + "/tokens"},
              &pki));
  for (const char* path : {"/healthz", "/readyz"}) {
    const TlsExchange ex = Https(port_, pki, Get(path), false);
    EXPECT_TRUE(ex.handshake) << path;
    EXPECT_EQ(StatusOf(ex.response), 200) << path << " without a client certificate:\n" << ex.response;
  }
  for (const char* path : {"/metrics", "/v1/jobs", "/v1/jobs/abc", "/v1/jobs/abc/events"}) {
    const TlsExchange none = Https(port_, pki, Get(path), false);
    EXPECT_TRUE(none.handshake) << path;
    const int status = StatusOf(none.response);
    EXPECT_TRUE(status == 401 || status == 403) << path << " without a client certificate:\n" << none.response;
    const TlsExchange alice = Https(port_, pki, Get(path), true);
    EXPECT_NE(StatusOf(alice.response), 401) << path << " with alice's certificate:\n" << alice.response;
    EXPECT_NE(StatusOf(alice.response), 403) << path << " with alice's certificate:\n" << alice.response;
  }
  EXPECT_EQ(StatusOf(Https(port_, pki, Get("/v1/jobs"), true).response), 200);
  EXPECT_EQ(StatusOf(Https(port_, pki, Get("/metrics"), true).response), 200);
}

}  // namespace
}  // namespace fp8d::itest
