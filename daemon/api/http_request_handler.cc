// SPDX-License-Identifier: Apache-2.0
#include "daemon/api/http_request_handler.h"

#include <map>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/write.hpp>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "daemon/api/http_metrics.h"
#include "daemon/api/validation.h"

namespace fp8d::api {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr const char* kAllowedMethods = "GET, HEAD";

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

// google.rpc.Status-shaped error body, as AIP-193 asks of JSON APIs; `http_code` overrides the
// code's usual mapping where HTTP has a more exact one (405).
HttpResponse ErrorResponse(unsigned version, const fp8::Status& status, int http_code = 0) {
  if (http_code == 0) http_code = HttpCode(status.code());
  HttpResponse res{static_cast<http::status>(http_code), version};
  res.set(http::field::content_type, "application/json");
  if (status.code() == fp8::StatusCode::kUnauthenticated) {
    res.set(http::field::www_authenticate, "Bearer");
  }
  if (http_code == 405) res.set(http::field::allow, kAllowedMethods);
  nlohmann::json body = {{"error",
                          {{"code", http_code},
                           {"status", fp8::StatusCodeName(status.code())},
                           {"message", status.message()}}}};
  // Messages quote what the client sent; bytes that are not UTF-8 must not make dump() throw.
  res.body() = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return res;
}

HttpResponse TextResponse(unsigned version, int code, const std::string& type, std::string body) {
  HttpResponse res{static_cast<http::status>(code), version};
  res.set(http::field::content_type, type);
  res.body() = std::move(body);
  return res;
}

// What a method other than GET and HEAD gets: audited with this status, answered 405.
fp8::Status ReadOnlyRefusal(const HttpRequest& req, const std::string& path) {
  return fp8::Status(fp8::StatusCode::kUnimplemented, std::string(req.method_string()) + " " + path +
                                                          ": the HTTP API is read-only (GET, HEAD); use gRPC");
}

HttpResponse MethodNotAllowed(const HttpRequest& req, const std::string& path) {
  return ErrorResponse(req.version(), ReadOnlyRefusal(req, path), 405);
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

using Done = std::function<void(HttpResponse)>;

void GetJob(const HttpRequest& req, const std::string& name, bool events, HttpBackend& backend, Done done) {
  fp8d::v1::GetJobRequest get;
  get.set_name(name);
  get.set_view(events ? fp8d::v1::JOB_VIEW_FULL : fp8d::v1::JOB_VIEW_BASIC);
  backend.GetJob(get, [version = req.version(), events, done](fp8::StatusOr<fp8d::v1::Job> job) {
    if (!job.ok()) return done(ErrorResponse(version, job.status()));
    if (!events) return done(TextResponse(version, 200, "application/json", ToJson(*job)));
    // Only the events: a Job with nothing else set maps to {"events": [...]}.
    fp8d::v1::Job only;
    *only.mutable_events() = job->events();
    done(TextResponse(version, 200, "application/json", ToJson(only)));
  });
}

void ListJobs(const HttpRequest& req, const std::map<std::string, std::string>& query,
              HttpBackend& backend, Done done) {
  const unsigned version = req.version();
  fp8d::v1::ListJobsRequest list;
  if (auto it = query.find("page_size"); it != query.end()) {
    try {
      list.set_page_size(std::stoi(it->second));
    } catch (const std::exception&) {
      return done(ErrorResponse(version, fp8::InvalidArgumentError("page_size: not a number")));
    }
  }
  if (auto it = query.find("page_token"); it != query.end()) list.set_page_token(it->second);
  if (auto it = query.find("state"); it != query.end()) {
    fp8d::v1::JobState state;
    if (!fp8d::v1::JobState_Parse(it->second, &state)) {
      return done(ErrorResponse(version, fp8::InvalidArgumentError("state: unknown value " + it->second)));
    }
    list.set_state(state);
  }
  if (auto it = query.find("kind"); it != query.end()) {
    fp8d::v1::JobKind kind;
    if (!fp8d::v1::JobKind_Parse(it->second, &kind)) {
      return done(ErrorResponse(version, fp8::InvalidArgumentError("kind: unknown value " + it->second)));
    }
    list.set_kind(kind);
  }
  fp8::Status valid = ValidateListJobsRequest(list);
  if (!valid.ok()) return done(ErrorResponse(version, valid));
  if (list.page_size() == 0) list.set_page_size(50);
  backend.ListJobs(list, [version, done](fp8::StatusOr<fp8d::v1::ListJobsResponse> page) {
    if (!page.ok()) return done(ErrorResponse(version, page.status()));
    done(TextResponse(version, 200, "application/json", ToJson(*page)));
  });
}

// The manager's figures, then every job, page by page, each page asked for when the previous
// one has arrived.
struct MetricsScrape : std::enable_shared_from_this<MetricsScrape> {
  HttpBackend& backend;
  unsigned version;
  Done done;
  core::ManagerFigures figures;
  std::vector<fp8d::v1::Job> jobs;

  MetricsScrape(HttpBackend& b, unsigned v, Done d) : backend(b), version(v), done(std::move(d)) {}

  void Start() {
    backend.Figures([self = shared_from_this()](fp8::StatusOr<core::ManagerFigures> figures) {
      if (!figures.ok()) return self->done(ErrorResponse(self->version, figures.status()));
      self->figures = std::move(figures).value();
      self->Next("");
    });
  }

  void Next(const std::string& token) {
    fp8d::v1::ListJobsRequest list;
    list.set_page_size(1000);
    list.set_page_token(token);
    backend.ListJobs(list, [self = shared_from_this()](fp8::StatusOr<fp8d::v1::ListJobsResponse> page) {
      if (!page.ok()) return self->done(ErrorResponse(self->version, page.status()));
      for (auto& j : *page->mutable_jobs()) self->jobs.push_back(std::move(j));
      if (!page->next_page_token().empty()) return self->Next(page->next_page_token());
      self->done(TextResponse(self->version, 200, "text/plain; version=0.0.4; charset=utf-8",
                              RenderMetrics(self->jobs, self->figures)));
    });
  }
};

void Route(const HttpRequest& req, const HttpCaller& caller, HttpBackend& backend, Done done) {
  const std::string target(req.target());
  // A request target is ASCII (RFC 3986); Beast lets other bytes through, and they would reach
  // the messages and the audit line.
  for (const char c : target) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return done(ErrorResponse(req.version(), fp8::InvalidArgumentError(
                                                   "request target: only printable ASCII is allowed")));
    }
  }
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const bool read_only = req.method() == http::verb::get || req.method() == http::verb::head;
  // Probes carry no credentials (not even a client certificate: a kubelet has none) and
  // reveal nothing but liveness and readiness.
  if (path == "/healthz" || path == "/readyz") {
    if (!read_only) return done(MethodNotAllowed(req, path));
    if (path == "/healthz") {
      return done(backend.Live() ? TextResponse(req.version(), 200, "text/plain", "ok\n")
                                 : TextResponse(req.version(), 503, "text/plain",
                                                "the job manager's thread is not answering\n"));
    }
    return done(backend.Ready() ? TextResponse(req.version(), 200, "text/plain", "ready\n")
                                : TextResponse(req.version(), 503, "text/plain", "recovering\n"));
  }
  if (caller.require_client_certificate && !caller.client_certificate_verified) {
    return done(ErrorResponse(req.version(), fp8::Status(fp8::StatusCode::kUnauthenticated,
                                                         path + ": a client certificate signed by "
                                                                "--tls-client-ca is required")));
  }
  CallerInfo info = caller.info;
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    ParseAuthorizationHeader(std::string_view(it->value().data(), it->value().size()), &info);
  }
  fp8::StatusOr<Principal> principal = backend.Authenticate(info);
  if (!principal.ok()) return done(ErrorResponse(req.version(), principal.status()));
  if (!read_only) {
    // The role is checked first (a viewer learns only that it may not), and the attempt is
    // audited either way.
    const std::string method = "Http" + std::string(req.method_string());
    fp8::Status allowed = backend.AuthorizeAndAudit(*principal, method, path, ReadOnlyRefusal(req, path));
    if (!allowed.ok()) return done(ErrorResponse(req.version(), allowed));
    return done(MethodNotAllowed(req, path));
  }
  if (!backend.Ready()) {
    return done(ErrorResponse(req.version(), fp8::UnavailableError("fp8d is recovering its jobs")));
  }
  if (path == "/metrics") {
    return std::make_shared<MetricsScrape>(backend, req.version(), std::move(done))->Start();
  }
  const auto query = QueryParams(q == std::string::npos ? "" : std::string_view(target).substr(q + 1));
  if (path == "/v1/jobs") return ListJobs(req, query, backend, std::move(done));
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
    if (!valid.ok()) return done(ErrorResponse(req.version(), valid));
    return GetJob(req, name, events, backend, std::move(done));
  }
  done(ErrorResponse(req.version(), fp8::NotFoundError(path + ": no such resource")));
}

}  // namespace

void ConfigureRequestParser(HttpRequestParser& parser) {
  parser.header_limit(kHttpHeaderLimit);
  parser.body_limit(kHttpBodyLimit);
}

std::optional<HttpResponse> ParseErrorResponse(const beast::error_code& ec) {
  if (ec == http::error::end_of_stream) return std::nullopt;
  // bad_version too: Beast parses HTTP/1.0 and HTTP/1.1 only, and cannot tell HTTP/2.0 from
  // garbage, so 505 is never certain.
  int code = 400;
  std::string what = "malformed HTTP request: " + ec.message();
  if (ec == http::error::header_limit) {
    code = 431;
    what = "request header larger than " + std::to_string(kHttpHeaderLimit) + " bytes";
  } else if (ec == http::error::body_limit) {
    code = 413;
    what = "request body larger than " + std::to_string(kHttpBodyLimit) + " bytes";
  }
  HttpResponse res = TextResponse(11, code, "text/plain", what + "\n");
  FinishResponse(res, false);
  return res;
}

void HandleHttpRequest(const HttpRequest& request, const HttpCaller& caller, HttpBackend& backend,
                       std::function<void(HttpResponse)> done) {
  const bool head = request.method() == http::verb::head;
  auto finish = [head, done = std::move(done)](HttpResponse res) {
    FinishResponse(res, head);
    done(std::move(res));
  };
  Route(request, caller, backend, std::move(finish));
}

void FinishResponse(HttpResponse& response, bool head) {
  response.set(http::field::server, "fp8d");
  response.keep_alive(false);
  response.prepare_payload();
  // Content-Length stays what GET would send (RFC 9110 §9.3.2).
  if (head) response.body().clear();
}

HttpResponse OverloadedResponse() {
  HttpResponse res = TextResponse(11, 503, "text/plain", "too many connections\n");
  FinishResponse(res, false);
  return res;
}

void HandleHttpBytes(std::string_view bytes, const HttpCaller& caller, HttpBackend& backend,
                     std::function<void(std::string)> done) {
  HttpRequestParser parser;
  ConfigureRequestParser(parser);
  parser.eager(true);
  beast::error_code ec;
  size_t used = 0;
  while (!ec && !parser.is_done() && used < bytes.size()) {
    const size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == http::error::need_more || (!ec && n == 0)) {
      ec = {};
      break;
    }
  }
  if (!ec && !parser.is_done()) {
    // The bytes ended: what a client closing its side here gets (as http::read decides).
    if (parser.got_some()) {
      parser.put_eof(ec);
    } else {
      ec = http::error::end_of_stream;
    }
  }
  std::optional<HttpResponse> refused;
  if (ec) {
    refused = ParseErrorResponse(ec);
    if (!refused) return done("");  // nobody to answer
  }
  auto serialize = [done = std::move(done)](HttpResponse res) {
    std::ostringstream out;
    out << res;
    done(out.str());
  };
  if (refused) return serialize(std::move(*refused));
  HandleHttpRequest(parser.get(), caller, backend, std::move(serialize));
}

}  // namespace fp8d::api
