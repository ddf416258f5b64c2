#include "daemon/api/http_listener.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <chrono>
#include <future>
#include <map>
#include <mutex>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include "daemon/api/http_metrics.h"
#include "daemon/api/validation.h"

namespace fp8d::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// The same JSON as `fp8ctl get -o json` prints.
std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

int HttpCode(fp8::StatusCode code) {
  switch (code) {
    case fp8::StatusCode::kOk: return 200;
    case fp8::StatusCode::kInvalidArgument: return 400;
    case fp8::StatusCode::kUnauthenticated: return 401;
    case fp8::StatusCode::kPermissionDenied: return 403;
    case fp8::StatusCode::kNotFound: return 404;
    case fp8::StatusCode::kAlreadyExists: case fp8::StatusCode::kAborted: return 409;
    case fp8::StatusCode::kFailedPrecondition: return 400;
    case fp8::StatusCode::kResourceExhausted: return 429;
    case fp8::StatusCode::kUnimplemented: return 501;
    case fp8::StatusCode::kUnavailable: return 503;
    case fp8::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

// google.rpc.Status-shaped error body, as AIP-193 asks of JSON APIs.
Response ErrorResponse(const Request& req, const fp8::Status& status) {
  Response res{static_cast<http::status>(HttpCode(status.code())), req.version()};
  res.set(http::field::content_type, "application/json");
  if (status.code() == fp8::StatusCode::kUnauthenticated) {
    res.set(http::field::www_authenticate, "Bearer");
  }
  nlohmann::json body = {{"error",
                          {{"code", HttpCode(status.code())},
                           {"status", fp8::StatusCodeName(status.code())},
                           {"message", status.message()}}}};
  res.body() = body.dump() + "\n";
  return res;
}

Response TextResponse(const Request& req, int code, const std::string& type, std::string body) {
  Response res{static_cast<http::status>(code), req.version()};
  res.set(http::field::content_type, type);
  res.body() = std::move(body);
  return res;
}

std::map<std::string, std::string> QueryParams(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    const size_t eq = kv.find('=');
    out[std::string(kv.substr(0, eq))] = eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

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

}  // namespace

class HttpListener::Impl {
 public:
  Impl(asio::io_context& manager_io, core::JobManager* manager, std::shared_ptr<const AuthPolicy> auth,
       HttpOptions options, std::function<bool()> ready)
      : manager_io_(manager_io), manager_(manager), auth_(std::move(auth)),
        options_(std::move(options)), ready_(std::move(ready)), acceptor_(io_),
        pool_(static_cast<size_t>(std::max(1, options_.threads))) {}

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
    thread_ = std::thread([this] { io_.run(); });
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
        ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
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
    if (stopped_.exchange(true)) return;
    asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
    });
    if (thread_.joinable()) thread_.join();
    pool_.join();
  }

 private:
  void Accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec) {
        if (acceptor_.is_open()) Accept();
        return;
      }
      // A silent client cannot hold a pool thread for long.
      timeval tv{10, 0};
      setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      auto shared = std::make_shared<tcp::socket>(std::move(socket));
      asio::post(pool_, [this, shared] { Serve(std::move(*shared)); });
      Accept();
    });
  }

  void Serve(tcp::socket socket) {
    boost::system::error_code ec;
    CallerInfo caller;
    caller.peer = PeerString(socket.remote_endpoint(ec));
    std::shared_ptr<asio::ssl::context> tls;
    {
      std::lock_guard<std::mutex> lock(tls_mu_);
      tls = tls_;
    }
    if (tls == nullptr) {
      ServeStream(socket, caller);
      socket.shutdown(tcp::socket::shutdown_both, ec);
      return;
    }
    asio::ssl::stream<tcp::socket&> stream(socket, *tls);
    stream.handshake(asio::ssl::stream_base::server, ec);
    if (ec) return;  // plaintext or an untrusted client certificate: no response is possible
    if (X509* cert = SSL_get_peer_certificate(stream.native_handle())) {
      char cn[256] = {0};
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
      caller.tls_common_name = cn;
      X509_free(cert);
    }
    ServeStream(stream, caller);
    stream.shutdown(ec);
  }

  template <typename Stream>
  void ServeStream(Stream& stream, CallerInfo caller) {
    beast::flat_buffer buffer;
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 * 1024);
    boost::system::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec) return;
    const Request& req = parser.get();
    if (auto it = req.find(http::field::authorization); it != req.end()) {
      ParseAuthorizationHeader(std::string_view(it->value().data(), it->value().size()), &caller);
    }
    Response res = Route(req, caller);
    res.set(http::field::server, "fp8d");
    res.keep_alive(false);
    res.prepare_payload();
    http::write(stream, res, ec);
  }

  Response Route(const Request& req, const CallerInfo& caller) {
    const std::string target(req.target());
    const size_t q = target.find('?');
    const std::string path = target.substr(0, q);
    const auto query = QueryParams(q == std::string::npos ? "" : std::string_view(target).substr(q + 1));
    // Probes carry no credentials and reveal nothing but liveness and readiness.
    if (path == "/healthz") return TextResponse(req, 200, "text/plain", "ok\n");
    if (path == "/readyz") {
      return ready_() ? TextResponse(req, 200, "text/plain", "ready\n")
                      : TextResponse(req, 503, "text/plain", "recovering\n");
    }
    fp8::StatusOr<Principal> principal = auth_->Authenticate(caller);
    if (!principal.ok()) return ErrorResponse(req, principal.status());
    const bool read_only = req.method() == http::verb::get || req.method() == http::verb::head;
    if (!read_only) {
      const std::string method = "Http" + std::string(req.method_string());
      fp8::Status allowed = AuthorizeMethod(*principal, method);
      if (allowed.ok()) {
        allowed = fp8::Status(fp8::StatusCode::kUnimplemented, std::string(req.method_string()) +
                                                                   " " + path +
                                                                   ": the HTTP API is read-only; use gRPC");
      }
      AuditLog(*principal, method, path, allowed);
      return ErrorResponse(req, allowed);
    }
    if (!ready_()) return ErrorResponse(req, fp8::UnavailableError("fp8d is recovering its jobs"));
    if (path == "/metrics") return Metrics(req);
    if (path == "/v1/jobs") return ListJobs(req, query);
    const std::string prefix = "/v1/jobs/";
    if (path.rfind(prefix, 0) == 0) {
      std::string rest = path.substr(prefix.size());
      bool events = false;
      if (rest.size() > 7 && rest.compare(rest.size() - 7, 7, "/events") == 0) {
        rest.resize(rest.size() - 7);
        events = true;
      }
      const std::string name = "jobs/" + rest;
      fp8::Status valid = ValidateJobName(name, "name");
      if (!valid.ok()) return ErrorResponse(req, valid);
      return GetJob(req, name, events);
    }
    return ErrorResponse(req, fp8::NotFoundError(path + ": no such resource"));
  }

  // Runs `call` on the manager's io_context and waits (on this pool thread) for its answer.
  template <typename T, typename Call>
  fp8::StatusOr<T> AskManager(Call call) {
    auto promise = std::make_shared<std::promise<fp8::StatusOr<T>>>();
    auto future = promise->get_future();
    asio::post(manager_io_, [this, call, promise] {
      call(manager_, [promise](fp8::StatusOr<T> result) { promise->set_value(std::move(result)); });
    });
    if (future.wait_for(std::chrono::milliseconds(options_.manager_timeout_ms)) !=
        std::future_status::ready) {
      return fp8::Status(fp8::StatusCode::kDeadlineExceeded, "the job manager did not answer in time");
    }
    return future.get();
  }

  Response GetJob(const Request& req, const std::string& name, bool events) {
    fp8d::v1::GetJobRequest get;
    get.set_name(name);
    get.set_view(events ? fp8d::v1::JOB_VIEW_FULL : fp8d::v1::JOB_VIEW_BASIC);
    auto job = AskManager<fp8d::v1::Job>([get](core::JobManager* m, auto done) { m->GetJob(get, done); });
    if (!job.ok()) return ErrorResponse(req, job.status());
    if (!events) return TextResponse(req, 200, "application/json", ToJson(*job));
    // Only the events: a Job with nothing else set maps to {"events": [...]}.
    fp8d::v1::Job only;
    *only.mutable_events() = job->events();
    return TextResponse(req, 200, "application/json", ToJson(only));
  }

  Response ListJobs(const Request& req, const std::map<std::string, std::string>& query) {
    fp8d::v1::ListJobsRequest list;
    if (auto it = query.find("page_size"); it != query.end()) {
      try {
        list.set_page_size(std::stoi(it->second));
      } catch (const std::exception&) {
        return ErrorResponse(req, fp8::InvalidArgumentError("page_size: not a number"));
      }
    }
    if (auto it = query.find("page_token"); it != query.end()) list.set_page_token(it->second);
    if (auto it = query.find("state"); it != query.end()) {
      fp8d::v1::JobState state;
      if (!fp8d::v1::JobState_Parse(it->second, &state)) {
        return ErrorResponse(req, fp8::InvalidArgumentError("state: unknown value " + it->second));
      }
      list.set_state(state);
    }
    if (auto it = query.find("kind"); it != query.end()) {
      fp8d::v1::JobKind kind;
      if (!fp8d::v1::JobKind_Parse(it->second, &kind)) {
        return ErrorResponse(req, fp8::InvalidArgumentError("kind: unknown value " + it->second));
      }
      list.set_kind(kind);
    }
    fp8::Status valid = ValidateListJobsRequest(list);
    if (!valid.ok()) return ErrorResponse(req, valid);
    if (list.page_size() == 0) list.set_page_size(50);
    auto page = AskManager<fp8d::v1::ListJobsResponse>(
        [list](core::JobManager* m, auto done) { m->ListJobs(list, done); });
    if (!page.ok()) return ErrorResponse(req, page.status());
    return TextResponse(req, 200, "application/json", ToJson(*page));
  }

  Response Metrics(const Request& req) {
    std::vector<fp8d::v1::Job> jobs;
    std::string token;
    do {  // every job, page by page
      fp8d::v1::ListJobsRequest list;
      list.set_page_size(1000);
      list.set_page_token(token);
      auto page = AskManager<fp8d::v1::ListJobsResponse>(
          [list](core::JobManager* m, auto done) { m->ListJobs(list, done); });
      if (!page.ok()) return ErrorResponse(req, page.status());
      for (auto& j : *page->mutable_jobs()) jobs.push_back(std::move(j));
      token = page->next_page_token();
    } while (!token.empty());
    return TextResponse(req, 200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics(jobs));
  }

  asio::io_context& manager_io_;
  core::JobManager* manager_;
  std::shared_ptr<const AuthPolicy> auth_;
  HttpOptions options_;
  std::function<bool()> ready_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::thread_pool pool_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
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
