// SPDX-License-Identifier: Apache-2.0
// fp8ctl contexts, as kubeconfig does: ~/.config/fp8d/config.yaml (or $XDG_CONFIG_HOME/fp8d)
// holds named contexts and the current one:
//
//   current-context: prod
//   contexts:
//     - name: prod
//       server: fp8d.example.com:8443
//       ca: /etc/fp8d/ca.pem          # TLS; "tls: true" uses the system roots instead
//       token-file: ~/.fp8d-token     # or token: <token>
//       client-cert: /path/me.pem     # mutual TLS
//       client-key: /path/me.key
//     - name: local
//       server: unix:/run/fp8d/fp8d.sock
//
// Precedence: --server, $FP8D_ADDR, then the context's server; --tls-ca, then the context's
// ca; $FP8D_TOKEN, then the context's token.
#pragma once

#include <string>
#include <vector>

#include "client/job_client.h"
#include "common/status.h"

namespace fp8d::client {

struct Context {
  std::string name;
  ConnectionOptions connection;
  std::string token_file;
};

struct ContextConfig {
  std::string path;             // the file (it may not exist)
  std::string current_context;  // may be empty
  std::vector<Context> contexts;
};

std::string DefaultContextConfigPath();
// A missing file is an empty config; a malformed one INVALID_ARGUMENT naming the key.
StatusOr<ContextConfig> LoadContextConfig(const std::string& path);
// Rewrites current-context, keeping every other key of the file.
Status UseContext(const std::string& path, const std::string& name);

struct ConnectionFlags {
  std::string server;   // --server
  std::string context;  // --context
  std::string tls_ca;   // --tls-ca
};

// The connection for these flags, the environment and the config file. `address` stays empty
// when neither a flag, $FP8D_ADDR nor a context names a server (the caller's default applies).
StatusOr<ConnectionOptions> ResolveConnection(const ConnectionFlags& flags);

}  // namespace fp8d::client
