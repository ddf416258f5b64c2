// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: arbitrary bytes as one HTTP request through the listener's parse and route
// step (daemon/api/http_request_handler.h), against a backend with a few jobs. Every input must
// be answered synchronously with one well-formed HTTP/1.1 status line whose code is one the
// listener sends, a Content-Length equal to the body sent (a HEAD answer sends none), and never
// crash; the empty input alone (a client that closed at once) gets no answer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "daemon/api/http_request_handler.h"

namespace {

using namespace fp8d;

class FakeBackend final : public api::HttpBackend {
 public:
  bool Ready() const override { return true; }

  fp8::StatusOr<api::Principal> Authenticate(const api::CallerInfo& caller) const override {
    if (caller.authorization_malformed) return fp8::Status(fp8::StatusCode::kUnauthenticated, "malformed");
    if (!caller.bearer_token) return api::Principal{"viewer", api::Role::kViewer, -1};
    if (*caller.bearer_token == "admin") return api::Principal{"admin", api::Role::kAdmin, -1};
    return fp8::Status(fp8::StatusCode::kUnauthenticated, "unknown token");
  }

  fp8::Status AuthorizeAndAudit(const api::Principal& principal, std::string_view method, std::string_view,
                                const fp8::Status&) const override {
    if (principal.role >= api::Role::kSubmitter) return fp8::OkStatus();
    return fp8::Status(fp8::StatusCode::kPermissionDenied, std::string(method) + ": viewer");
  }

  void GetJob(const v1::GetJobRequest& request, std::function<void(fp8::StatusOr<v1::Job>)> done) override {
    if (request.name() != "jobs/a") return done(fp8::NotFoundError(request.name() + ": not found"));
    done(MakeJob("jobs/a"));
  }

  void ListJobs(const v1::ListJobsRequest& request,
                std::function<void(fp8::StatusOr<v1::ListJobsResponse>)> done) override {
    v1::ListJobsResponse page;
    *page.add_jobs() = MakeJob(request.page_token().empty() ? "jobs/a" : "jobs/b");
    if (request.page_token().empty() && request.page_size() == 1000) page.set_next_page_token("p2");
    done(page);
  }

 private:
  static v1::Job MakeJob(const std::string& name) {
    v1::Job job;
    job.set_name(name);
    job.set_state(v1::RUNNING);
    job.set_kind(v1::TRAIN);
    job.add_events()->set_to_state(v1::RUNNING);
    return job;
  }
};

const std::set<unsigned> kCodes = {200, 400, 401, 403, 404, 405, 413, 431, 501, 503, 504};

void CheckResponse(std::string_view request, const std::string& response) {
  if (response.empty()) {
    if (!request.empty()) std::abort();
    return;
  }
  namespace http = boost::beast::http;
  http::response_parser<http::string_body> parser;
  parser.eager(false);
  boost::beast::error_code ec;
  const size_t header = parser.put(boost::asio::buffer(response), ec);
  if (ec || !parser.is_header_done()) std::abort();
  const auto& res = parser.get();
  if (res.version() != 11 && res.version() != 10) std::abort();
  if (kCodes.count(res.result_int()) == 0) std::abort();
  if (res.keep_alive()) std::abort();
  const auto length = parser.content_length();
  if (!length) std::abort();
  const size_t body = response.size() - header;
  const bool head = request.substr(0, 5) == "HEAD ";
  if (body != *length && !(head && body == 0)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view request(reinterpret_cast<const char*>(data), size);
  static FakeBackend backend;
  // Each input on the plain listener and on the mTLS one, from a caller without a certificate.
  for (const bool mtls : {false, true}) {
    api::HttpCaller caller;
    caller.info.peer = "ipv4:127.0.0.1:40000";
    caller.require_client_certificate = mtls;
    bool answered = false;
    api::HandleHttpBytes(request, caller, backend, [&](std::string response) {
      answered = true;
      CheckResponse(request, response);
    });
    if (!answered) std::abort();  // the fake answers at once, so the handler must have too
  }
  return 0;
}
