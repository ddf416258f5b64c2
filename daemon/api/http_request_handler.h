// SPDX-License-Identifier: Apache-2.0
// The HTTP listener's request step without sockets: parser limits, a status line for every
// malformed request, the routes (/healthz, /readyz, /metrics, /v1/jobs...) and the finishing of a
// response (HEAD keeps the headers GET would send and drops the body). The listener calls these
// between its asynchronous reads and writes; HandleHttpBytes composes them on a buffer for the
// fuzzer (tests/fuzz/http_request_fuzz.cc) and unit tests.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/status.h"
#include "daemon/api/auth_policy.h"
#include "daemon/core/job_counters.h"
#include "fp8d/v1/job_service.pb.h"

namespace fp8d::api {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
using HttpRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// What the routes need from the daemon. The job calls answer `done` exactly once, from any
// thread; the listener's implementation posts them to the manager and never waits.
class HttpBackend {
 public:
  virtual ~HttpBackend() = default;
  virtual bool Ready() const = 0;
  // /healthz: false when the manager's io thread has stopped turning (daemon/server's io
  // watchdog). A backend without a manager thread to watch is always live.
  virtual bool Live() const { return true; }
  virtual fp8::StatusOr<Principal> Authenticate(const CallerInfo& caller) const = 0;
  // OK when the principal may call `method` ("HttpPOST", ...); records the audit line.
  virtual fp8::Status AuthorizeAndAudit(const Principal& principal, std::string_view method,
                                        std::string_view path, const fp8::Status& outcome) const = 0;
  virtual void GetJob(const fp8d::v1::GetJobRequest& request,
                      std::function<void(fp8::StatusOr<fp8d::v1::Job>)> done) = 0;
  virtual void ListJobs(const fp8d::v1::ListJobsRequest& request,
                        std::function<void(fp8::StatusOr<fp8d::v1::ListJobsResponse>)> done) = 0;
  // The manager's counters and slots for /metrics. A backend without a manager has none.
  virtual void Figures(std::function<void(fp8::StatusOr<core::ManagerFigures>)> done) {
    done(core::ManagerFigures{});
  }
};

// What the transport knows about the caller beyond CallerInfo.
struct HttpCaller {
  CallerInfo info;                      // peer and certificate CN; the handler adds the token
  bool require_client_certificate = false;  // --tls-client-ca: every route but the probes
  bool client_certificate_verified = false;
};

inline constexpr size_t kHttpHeaderLimit = 8 * 1024;
inline constexpr size_t kHttpBodyLimit = 64 * 1024;

// A parser with the listener's header and body limits.
void ConfigureRequestParser(HttpRequestParser& parser);

// The answer to a request the parser refused (`ec` from it), or nullopt when there is nobody to
// answer (the client closed before sending a byte).
std::optional<HttpResponse> ParseErrorResponse(const boost::beast::error_code& ec);

// Routes a parsed request; `done` gets the finished response (FinishResponse applied), at once
// or later when job state had to be asked for.
void HandleHttpRequest(const HttpRequest& request, const HttpCaller& caller, HttpBackend& backend,
                       std::function<void(HttpResponse)> done);

// Server header, Connection: close, Content-Length; for HEAD the body is dropped afterwards.
void FinishResponse(HttpResponse& response, bool head);

// A plain 503 for a connection over the caps, before any request was read.
HttpResponse OverloadedResponse();

// One whole request in `bytes` → the serialized response, through the same steps as the
// listener (a request cut short is answered like a client that closed mid-request).
void HandleHttpBytes(std::string_view bytes, const HttpCaller& caller, HttpBackend& backend,
                     std::function<void(std::string)> done);

}  // namespace fp8d::api
