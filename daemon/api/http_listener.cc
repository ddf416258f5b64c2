// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/http_listener.h"

#include <array>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <spdlog/spdlog.h>

#include "daemon/api/http_request_handler.h"

namespace fp8d::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string PeerString(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  if (addr.is_v6()) {
    const auto v6 = addr.to_v6();
    if (v6.is_v4_mapped()) {
      return "ipv4:" + asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string() + ":" +
             std::to_string(ep.port());
    }
    return "ipv6:[" + v6.to_string() + "]:" + std::to_string(ep.port());
  }
  return "ipv4:" + addr.to_string() + ":" + std::to_string(ep.port());
}

// The peer's address without its port: the key of the per-peer cap.
std::string PeerAddress(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6()).to_string();
  }
  return addr.to_string();
}

// Open connections, in all and per peer address. A slot is released when its connection ends.
class ConnectionCaps : public std::enable_shared_from_this<ConnectionCaps> {
 public:
  class Slot {
   public:
    Slot(std::shared_ptr<ConnectionCaps> caps, std::string peer) : caps_(std::move(caps)), peer_(std::move(peer)) {}
    Slot(Slot&&) = default;
    ~Slot() {
      if (caps_ != nullptr) caps_->Release(peer_);
    }

   private:
    std::shared_ptr<ConnectionCaps> caps_;
    std::string peer_;
  };

  ConnectionCaps(int max_total, int max_per_peer) : max_total_(max_total), max_per_peer_(max_per_peer) {}

  std::optional<Slot> TryAcquire(const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    int& mine = per_peer_[peer];
    if (total_ >= max_total_ || mine >= max_per_peer_) {
      if (mine == 0) per_peer_.erase(peer);
      return std::nullopt;
    }
    ++mine;
    ++total_;
    return Slot(shared_from_this(), peer);
  }

 private:
  void Release(const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    --total_;
    if (auto it = per_peer_.find(peer); it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
  }

  const int max_total_;
  const int max_per_peer_;
  std::mutex mu_;
  int total_ = 0;
  std::map<std::string, int> per_peer_;
};

// Closed by Stop: after it, answers from the manager are dropped instead of posted to the
// listener's io_context, which is about to go away.
struct Lifeline {
  std::mutex mu;
  bool open = true;
};

// The routes' view of the daemon: the auth chain, readiness, and the manager's Get/List posted
// to its io_context. The answer comes back by a post to a strand of the listener's io_context;
// a timer answers DEADLINE_EXCEEDED first if the manager is slow. The manager's callback holds
// only a weak reference, so a connection never lives on in the manager's queue.
class ManagerBackend final : public HttpBackend {
 public:
  ManagerBackend(asio::io_context& io, asio::io_context& manager_io, core::JobManager* manager,
                 std::shared_ptr<const AuthPolicy> auth, std::function<bool()> ready,
                 std::function<bool()> live, std::shared_ptr<Lifeline> lifeline,
                 std::chrono::milliseconds timeout)
      : io_(io), manager_io_(manager_io), manager_(manager), auth_(std::move(auth)),
        ready_(std::move(ready)), live_(std::move(live)), lifeline_(std::move(lifeline)),
        timeout_(timeout) {}

  bool Ready() const override { return ready_(); }
  bool Live() const override { return !live_ || live_(); }

  fp8::StatusOr<Principal> Authenticate(const CallerInfo& caller) const override {
    return auth_->Authenticate(caller);
  }

  fp8::Status AuthorizeAndAudit(const Principal& principal, std::string_view method, std::string_view path,
                                const fp8::Status& outcome) const override {
    fp8::Status allowed = AuthorizeMethod(principal, method);
    AuditLog(principal, method, path, allowed.ok() ? outcome : allowed);
    return allowed;
  }

  void GetJob(const fp8d::v1::GetJobRequest& request,
              std::function<void(fp8::StatusOr<fp8d::v1::Job>)> done) override {
    Ask<fp8d::v1::Job>([request](core::JobManager* m, auto answer) { m->GetJob(request, answer); },
                       std::move(done));
  }

  void ListJobs(const fp8d::v1::ListJobsRequest& request,
                std::function<void(fp8::StatusOr<fp8d::v1::ListJobsResponse>)> done) override {
    Ask<fp8d::v1::ListJobsResponse>([request](core::JobManager* m, auto answer) { m->ListJobs(request, answer); },
                                    std::move(done));
  }

  void Figures(std::function<void(fp8::StatusOr<core::ManagerFigures>)> done) override {
    Ask<core::ManagerFigures>([](core::JobManager* m, auto answer) { answer(m->Figures()); }, std::move(done));
  }

 private:
  template <typename T>
  struct Pending {
    explicit Pending(asio::strand<asio::io_context::executor_type> strand) : timer(strand) {}
    asio::steady_timer timer;
    std::function<void(fp8::StatusOr<T>)> done;
    bool answered = false;
  };

  template <typename T, typename Call>
  void Ask(Call call, std::function<void(fp8::StatusOr<T>)> done) {
    auto pending = std::make_shared<Pending<T>>(asio::make_strand(io_));
    pending->done = std::move(done);
    pending->timer.expires_after(timeout_);
    pending->timer.async_wait([pending](const boost::system::error_code& ec) {
      if (ec || pending->answered) return;  // cancelled: the answer came first
      pending->answered = true;
      pending->done(fp8::Status(fp8::StatusCode::kDeadlineExceeded, "the job manager did not answer in time"));
    });
    std::weak_ptr<Pending<T>> weak = pending;
    asio::post(manager_io_, [manager = manager_, call, weak, lifeline = lifeline_] {
      call(manager, [weak, lifeline](fp8::StatusOr<T> result) {
        std::lock_guard<std::mutex> lock(lifeline->mu);
        if (!lifeline->open) return;
        std::shared_ptr<Pending<T>> p = weak.lock();
        if (p == nullptr) return;  // answered DEADLINE_EXCEEDED and gone
        asio::post(p->timer.get_executor(), [p, result = std::move(result)]() mutable {
          if (p->answered) return;
          p->answered = true;
          p->timer.cancel();
          p->done(std::move(result));
        });
      });
    });
  }

  asio::io_context& io_;
  asio::io_context& manager_io_;
  core::JobManager* manager_;
  std::shared_ptr<const AuthPolicy> auth_;
  std::function<bool()> ready_;
  std::function<bool()> live_;
  std::shared_ptr<Lifeline> lifeline_;
  std::chrono::milliseconds timeout_;
};

struct SessionSettings {
  std::chrono::milliseconds request_timeout;
  bool require_client_certificate = false;
};

// One connection: [TLS handshake], one request, one response, close. Everything runs on the
// connection's strand; the deadline set at accept covers the handshake and the whole request.
template <bool kTls>
class Session : public std::enable_shared_from_this<Session<kTls>> {
 public:
  using Stream = std::conditional_t<kTls, beast::ssl_stream<beast::tcp_stream>, beast::tcp_stream>;

  Session(tcp::socket socket, std::shared_ptr<asio::ssl::context> tls, ConnectionCaps::Slot slot,
          HttpBackend& backend, SessionSettings settings)
      : tls_(std::move(tls)), stream_(MakeStream(std::move(socket), tls_.get())), slot_(std::move(slot)),
        backend_(backend), settings_(settings) {}

  void Start() {
    boost::system::error_code ec;
    caller_.info.peer = PeerString(beast::get_lowest_layer(stream_).socket().remote_endpoint(ec));
    caller_.require_client_certificate = settings_.require_client_certificate;
    beast::get_lowest_layer(stream_).expires_after(settings_.request_timeout);
    if constexpr (kTls) {
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](const beast::error_code& ec) {
                                self->OnHandshake(ec);
                              });
    } else {
      Read();
    }
  }

 private:
  static Stream MakeStream(tcp::socket socket, asio::ssl::context* tls) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  void OnHandshake(const beast::error_code& ec) {
    // Plaintext, an untrusted certificate or the deadline: no response is possible.
    if (ec) return;
    if constexpr (kTls) {
      SSL* ssl = stream_.native_handle();
      if (X509* cert = SSL_get_peer_certificate(ssl)) {
        // The handshake asks for a certificate without demanding one; one that was sent has
        // been verified against --tls-client-ca, or the handshake would have failed.
        caller_.client_certificate_verified = SSL_get_verify_result(ssl) == X509_V_OK;
        if (caller_.client_certificate_verified) {
          char cn[256] = {0};
          X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
          caller_.info.tls_common_name = cn;
        }
        X509_free(cert);
      }
    }
    Read();
  }

  void Read() {
    ConfigureRequestParser(parser_);
    http::async_read(stream_, buffer_, parser_,
                     [self = this->shared_from_this()](const beast::error_code& ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(const beast::error_code& ec) {
    if (ec) {
      // Only the parser's refusals get an answer; a timeout or a broken connection has nobody
      // listening.
      if (ec.category() != http::make_error_code(http::error::end_of_stream).category()) return;
      std::optional<HttpResponse> res = ParseErrorResponse(ec);
      if (res) Write(std::move(*res));
      return;
    }
    HandleHttpRequest(parser_.get(), caller_, backend_, [self = this->shared_from_this()](HttpResponse res) {
      // Job answers arrive on the backend's strand; the stream is this connection's to touch.
      auto executor = beast::get_lowest_layer(self->stream_).get_executor();
      asio::dispatch(executor, [self, res = std::move(res)]() mutable { self->Write(std::move(res)); });
    });
  }

  void Write(HttpResponse res) {
    response_ = std::move(res);
    beast::get_lowest_layer(stream_).expires_after(settings_.request_timeout);
    http::async_write(stream_, response_, [self = this->shared_from_this()](const beast::error_code& ec, size_t) {
      if (!ec) self->Close();
    });
  }

  void Close() {
    beast::get_lowest_layer(stream_).expires_after(kCloseTimeout);
    if constexpr (kTls) {
      stream_.async_shutdown([self = this->shared_from_this()](const beast::error_code&) {});
    } else {
      // Half-close, then read what the client still sends (a body the parser refused) until it
      // closes too: closing with unread bytes would reset the connection and lose the answer.
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      Drain();
    }
  }

  void Drain() {
    stream_.async_read_some(asio::buffer(drain_), [self = this->shared_from_this()](const beast::error_code& ec,
                                                                                      size_t n) {
      self->drained_ += n;
      if (!ec && self->drained_ < kDrainLimit) self->Drain();
    });
  }

  static constexpr size_t kDrainLimit = 1 << 20;
  static constexpr std::chrono::seconds kCloseTimeout{2};

  std::shared_ptr<asio::ssl::context> tls_;  // before stream_, which refers to it
  Stream stream_;
  ConnectionCaps::Slot slot_;
  HttpBackend& backend_;
  SessionSettings settings_;
  HttpCaller caller_;
  beast::flat_buffer buffer_;
  HttpRequestParser parser_;
  HttpResponse response_;
  std::array<char, 4096> drain_{};
  size_t drained_ = 0;
};

// A connection over the caps: a 503 (plaintext) and close, without reading its request.
void Refuse(tcp::socket socket) {
  auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
  auto res = std::make_shared<HttpResponse>(OverloadedResponse());
  stream->expires_after(std::chrono::seconds(1));
  http::async_write(*stream, *res, [stream, res](const beast::error_code&, size_t) {
    beast::error_code ec;
    stream->socket().shutdown(tcp::socket::shutdown_both, ec);
  });
}

}  // namespace

class HttpListener::Impl {
 public:
  Impl(asio::io_context& manager_io, core::JobManager* manager, std::shared_ptr<const AuthPolicy> auth,
       HttpOptions options, std::function<bool()> ready)
      : options_(std::move(options)), lifeline_(std::make_shared<Lifeline>()),
        caps_(std::make_shared<ConnectionCaps>(options_.max_connections, options_.max_connections_per_peer)),
        backend_(io_, manager_io, manager, std::move(auth), std::move(ready), options_.live, lifeline_,
                 std::chrono::milliseconds(options_.manager_timeout_ms)),
        acceptor_(asio::make_strand(io_)), retry_(acceptor_.get_executor()) {}

  fp8::StatusOr<int> Start() {
    if (!options_.tls_cert.empty()) FP8_RETURN_IF_ERROR(ReloadTls());
    const size_t colon = options_.listen.rfind(':');
    if (colon == std::string::npos) {
      return fp8::InvalidArgumentError("--http-listen " + options_.listen + ": expected HOST:PORT");
    }
    std::string host = options_.listen.substr(0, colon);
    if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
    if (host == "localhost") host = "127.0.0.1";
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(host, ec);
    int port = 0;
    try {
      port = std::stoi(options_.listen.substr(colon + 1));
    } catch (const std::exception&) {
      ec = asio::error::invalid_argument;
    }
    if (ec) return fp8::InvalidArgumentError("--http-listen " + options_.listen + ": bad address");
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return fp8::FailedPreconditionError("--http-listen " + options_.listen + ": " + ec.message());
    const int bound = acceptor_.local_endpoint().port();
    Accept();
    for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { io_.run(); });
    return bound;
  }

  fp8::Status ReloadTls() {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
    try {
      ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1);
      ctx->use_certificate_chain_file(options_.tls_cert);
      ctx->use_private_key_file(options_.tls_key, asio::ssl::context::pem);
      if (!options_.tls_client_ca.empty()) {
        ctx->load_verify_file(options_.tls_client_ca);
        // Asked for, not demanded: probes come without one; the other routes refuse such a
        // caller after the handshake. A certificate that is sent must verify.
        ctx->set_verify_mode(asio::ssl::verify_peer);
        static const unsigned char kSessionContext[] = "fp8d-http";
        SSL_CTX_set_session_id_context(ctx->native_handle(), kSessionContext, sizeof(kSessionContext) - 1);
      }
    } catch (const boost::system::system_error& e) {
      return fp8::InvalidArgumentError("--http-listen TLS files (" + options_.tls_cert + ", " +
                                       options_.tls_key + "): " + e.what());
    }
    std::lock_guard<std::mutex> lock(tls_mu_);
    tls_ = std::move(ctx);
    return fp8::OkStatus();
  }

  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    {
      std::lock_guard<std::mutex> lock(lifeline_->mu);
      lifeline_->open = false;
    }
    io_.stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    boost::system::error_code ec;
    acceptor_.close(ec);
  }

 private:
  void Accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) {
        if (!acceptor_.is_open()) return;
        // Out of descriptors, say: try again shortly rather than spin.
        retry_.expires_after(std::chrono::milliseconds(100));
        retry_.async_wait([this](const boost::system::error_code&) { Accept(); });
        return;
      }
      Admit(std::move(socket));
      Accept();
    });
  }

  void Admit(tcp::socket socket) {
    boost::system::error_code ec;
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (ec) return;
    std::shared_ptr<asio::ssl::context> tls;
    {
      std::lock_guard<std::mutex> lock(tls_mu_);
      tls = tls_;
    }
    std::optional<ConnectionCaps::Slot> slot = caps_->TryAcquire(PeerAddress(peer));
    if (!slot) {
      spdlog::debug("http: refusing a connection from {}: over the connection caps", PeerString(peer));
      if (tls == nullptr) Refuse(std::move(socket));
      return;  // a TLS client would need a handshake to read a 503; it is closed
    }
    const SessionSettings settings{std::chrono::milliseconds(options_.request_timeout_ms),
                                   tls != nullptr && !options_.tls_client_ca.empty()};
    if (tls == nullptr) {
      std::make_shared<Session<false>>(std::move(socket), nullptr, std::move(*slot), backend_, settings)->Start();
    } else {
      std::make_shared<Session<true>>(std::move(socket), tls, std::move(*slot), backend_, settings)->Start();
    }
  }

  HttpOptions options_;
  std::shared_ptr<Lifeline> lifeline_;
  std::shared_ptr<ConnectionCaps> caps_;
  asio::io_context io_;
  ManagerBackend backend_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
  std::mutex tls_mu_;
  std::shared_ptr<asio::ssl::context> tls_;
};

HttpListener::HttpListener(asio::io_context& manager_io, core::JobManager* manager,
                           std::shared_ptr<const AuthPolicy> auth, HttpOptions options,
                           std::function<bool()> ready)
    : impl_(std::make_unique<Impl>(manager_io, manager, std::move(auth), std::move(options),
                                   std::move(ready))) {}

HttpListener::~HttpListener() { Stop(); }

fp8::StatusOr<int> HttpListener::Start() { return impl_->Start(); }
fp8::Status HttpListener::ReloadTls() { return impl_->ReloadTls(); }
void HttpListener::Stop() { impl_->Stop(); }

}  // namespace fp8d::api
