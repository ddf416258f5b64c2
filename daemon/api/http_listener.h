// SPDX-License-Identifier: Apache-2.0
// The HTTP listener beside gRPC (--http-listen): /healthz, /readyz, /metrics (Prometheus text)
// and a read-only JSON view of jobs in the proto3 JSON mapping (/v1/jobs, /v1/jobs/{id},
// /v1/jobs/{id}/events), with the same TLS and auth sources as gRPC. Asynchronous Boost.Beast
// on an io_context of its own: no connection holds a thread while it waits, each has one
// deadline from accept for its TLS handshake and request, the connections per peer address and
// in all are capped, and job state is read through the manager's async Get/List (posted to its
// io_context, answered back by a post), so neither side ever waits on the other. Requests are
// parsed and routed by daemon/api/http_request_handler.h.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "common/status.h"
#include "daemon/api/auth_policy.h"
#include "daemon/core/job_manager.h"

namespace fp8d::api {

struct HttpOptions {
  std::string listen;         // HOST:PORT (port 0: any)
  std::string tls_cert;       // with tls_key: HTTPS
  std::string tls_key;
  // Client certificates signed by it are asked for; every route but /healthz and /readyz
  // refuses a caller without one.
  std::string tls_client_ca;
  int threads = 2;  // running the io_context
  int max_connections = 512;
  int max_connections_per_peer = 16;  // by address: one client cannot take them all
  int request_timeout_ms = 10000;     // from accept to the whole request (TLS handshake included)
  int manager_timeout_ms = 10000;
  // Answers /healthz (false: 503); empty: always live.
  std::function<bool()> live;
};

class HttpListener {
 public:
  HttpListener(boost::asio::io_context& manager_io, core::JobManager* manager,
               std::shared_ptr<const AuthPolicy> auth, HttpOptions options,
               std::function<bool()> ready);
  ~HttpListener();

  // Binds and starts serving; returns the bound port.
  fp8::StatusOr<int> Start();
  // Re-reads the TLS files (SIGHUP); new connections use them. Errors keep the old ones.
  fp8::Status ReloadTls();
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8d::api
