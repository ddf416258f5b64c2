// SPDX-License-Identifier: Apache-2.0
// The unix-socket listener for `--listen unix:PATH`. fp8d accepts the connections itself so it
// can read each peer's uid (SO_PEERCRED) before handing the socket to gRPC, which then names the
// connection's peer "fd:<n>"; LocalPeerAuthPolicy looks the uid up by that fd. gRPC 1.51 offers
// no peer credentials of its own.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/server.h>

#include "common/status.h"
#include "daemon/api/auth_policy.h"

namespace fp8d::server {

class UnixListener {
 public:
  UnixListener(std::shared_ptr<api::UnixPeerTable> peers) : peers_(std::move(peers)) {}
  ~UnixListener() { Stop(); }

  // Binds PATH (a stale socket file is replaced), mode 0666: any local user may connect, and is
  // then known by its uid.
  fp8::Status Bind(const std::string& path);
  // Accepts on a thread of its own and adds each connection to `server`.
  void Start(grpc::Server* server);
  void Stop();

 private:
  int FreshNumber(int fd);

  std::shared_ptr<api::UnixPeerTable> peers_;
  int next_fd_ = 64;
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fp8d::server
