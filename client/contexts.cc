// SPDX-License-Identifier: Apache-2.0
#include "client/contexts.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace fp8d::client {

namespace {

std::string ExpandHome(const std::string& path) {
  if (path.rfind("~/", 0) == 0) {
    if (const char* home = std::getenv("HOME")) return std::string(home) + path.substr(1);
  }
  return path;
}

std::string Str(const YAML::Node& node, const char* key) {
  return node[key] ? ExpandHome(node[key].as<std::string>()) : std::string();
}

StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fp8::InvalidArgumentError("token-file " + path + ": cannot be read");
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  return token;
}

}  // namespace

std::string DefaultContextConfigPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && xdg[0] != '\0') {
    return std::string(xdg) + "/fp8d/config.yaml";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.config/fp8d/config.yaml";
}

StatusOr<ContextConfig> LoadContextConfig(const std::string& path) {
  ContextConfig config;
  config.path = path;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return config;
  try {
    YAML::Node root = YAML::LoadFile(path);
    if (root.IsNull()) return config;
    if (!root.IsMap()) return fp8::InvalidArgumentError(path + ": must be a mapping");
    config.current_context = Str(root, "current-context");
    const YAML::Node list = root["contexts"];
    if (list && !list.IsSequence()) return fp8::InvalidArgumentError(path + ": contexts: must be a list");
    for (size_t i = 0; list && i < list.size(); ++i) {
      const YAML::Node c = list[i];
      Context context;
      context.name = Str(c, "name");
      if (context.name.empty()) {
        return fp8::InvalidArgumentError(path + ": contexts[" + std::to_string(i) + "].name: must be set");
      }
      context.connection.address = Str(c, "server");
      context.connection.ca_file = Str(c, "ca");
      context.connection.tls = c["tls"] && c["tls"].as<bool>();
      context.connection.token = Str(c, "token");
      context.token_file = Str(c, "token-file");
      context.connection.client_cert = Str(c, "client-cert");
      context.connection.client_key = Str(c, "client-key");
      context.connection.server_name = Str(c, "server-name");
      if (context.connection.client_cert.empty() != context.connection.client_key.empty()) {
        return fp8::InvalidArgumentError(path + ": contexts[" + std::to_string(i) +
                                         "]: client-cert and client-key go together");
      }
      config.contexts.push_back(std::move(context));
    }
  } catch (const YAML::Exception& e) {
    return fp8::InvalidArgumentError(path + ": " + e.what());
  }
  return config;
}

Status UseContext(const std::string& path, const std::string& name) {
  FP8_ASSIGN_OR_RETURN(ContextConfig config, LoadContextConfig(path));
  bool found = false;
  for (const Context& c : config.contexts) found = found || c.name == name;
  if (!found) return fp8::NotFoundError("context " + name + ": not in " + path);
  YAML::Node root = YAML::LoadFile(path);
  root["current-context"] = name;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << root << "\n";
    if (!out.good()) return fp8::InternalError(tmp + ": cannot write");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return fp8::InternalError(path + ": " + ec.message());
  return fp8::OkStatus();
}

StatusOr<ConnectionOptions> ResolveConnection(const ConnectionFlags& flags) {
  ConnectionOptions out;
  FP8_ASSIGN_OR_RETURN(ContextConfig config, LoadContextConfig(DefaultContextConfigPath()));
  const std::string wanted = !flags.context.empty() ? flags.context : config.current_context;
  if (!wanted.empty()) {
    const Context* found = nullptr;
    for (const Context& c : config.contexts) {
      if (c.name == wanted) found = &c;
    }
    if (found == nullptr) return fp8::InvalidArgumentError("--context " + wanted + ": not in " + config.path);
    out = found->connection;
    if (out.token.empty() && !found->token_file.empty()) {
      FP8_ASSIGN_OR_RETURN(out.token, ReadToken(found->token_file));
    }
  }
  if (!flags.server.empty()) {
    out.address = flags.server;
  } else if (const char* env = std::getenv("FP8D_ADDR"); env != nullptr && env[0] != '\0') {
    out.address = env;
  }
  if (!flags.tls_ca.empty()) out.ca_file = flags.tls_ca;
  if (const char* token = std::getenv("FP8D_TOKEN"); token != nullptr && token[0] != '\0') {
    out.token = token;
  }
  return out;
}

}  // namespace fp8d::client
