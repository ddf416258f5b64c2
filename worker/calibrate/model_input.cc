// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/model_input.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace fp8::calibrate {

namespace fs = std::filesystem;
using json = nlohmann::json;

StatusOr<json> ReadJsonFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return DataLossError(path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    return InvalidArgumentError(path + ": malformed JSON: " + e.what());
  }
}

Status ValidateShardName(const std::string& name, const std::string& where) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos)
    return InvalidArgumentError(where + ": shard name \"" + name +
                                "\" is not a plain file name (it would escape the model directory)");
  if (!name.ends_with(".safetensors"))
    return InvalidArgumentError(where + ": shard name \"" + name + "\" does not end in .safetensors");
  return OkStatus();
}

Status ValidateTensorName(const std::string& name, const std::string& where) {
  if (name.empty()) return InvalidArgumentError(where + ": empty tensor name");
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) return InvalidArgumentError(where + ": tensor name with a control byte");
  if (name.front() == '/' || name.find("../") != std::string::npos || name.find("/..") != std::string::npos ||
      name == "..")
    return InvalidArgumentError(where + ": tensor name \"" + name + "\" looks like a path escaping its directory");
  return OkStatus();
}

json ModelInput::Fingerprint() const {
  json fp = json::array();
  for (const auto& r : readers) {
    struct stat st {};
    ::stat(r.path().c_str(), &st);
    fp.push_back({{"path", r.path()}, {"size", static_cast<uint64_t>(st.st_size)},
                  {"mtime_ns", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec}});
  }
  return fp;
}

StatusOr<ModelInput> OpenModelInput(const std::string& input) {
  ModelInput m;
  std::error_code ec;
  const fs::file_status st = fs::status(input, ec);
  if (ec || !fs::exists(st)) return FailedPreconditionError("input: " + input + " does not exist");

  if (fs::is_regular_file(st)) {
    m.single_file = true;
    fs::path p(input);
    m.dir = p.has_parent_path() ? p.parent_path().string() : ".";
    m.shards.push_back(p.filename().string());
  } else if (fs::is_directory(st)) {
    m.dir = input;
    const std::string index_path = (fs::path(input) / kIndexFile).string();
    if (fs::exists(index_path)) {
      FP8_ASSIGN_OR_RETURN(json index, ReadJsonFile(index_path));
      if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
        return InvalidArgumentError(index_path + ": no \"weight_map\" object");
      std::set<std::string> shards;
      for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
        FP8_RETURN_IF_ERROR(ValidateTensorName(it.key(), index_path));
        if (!it->is_string())
          return InvalidArgumentError(index_path + ": weight_map[\"" + it.key() + "\"] is not a string");
        FP8_RETURN_IF_ERROR(ValidateShardName(it->get<std::string>(), index_path));
        shards.insert(it->get<std::string>());
      }
      if (shards.empty()) return InvalidArgumentError(index_path + ": weight_map is empty");
      m.shards.assign(shards.begin(), shards.end());
      m.index = std::move(index);
    } else if (fs::exists(fs::path(input) / kTrainerStateFile) && fs::exists(fs::path(input) / kTrainerModelFile)) {
      // An fp8d checkpoint (step-N): the model is model.safetensors; optimizer.safetensors
      // holds the AdamW moments, training state that must be neither converted nor copied.
      m.shards.push_back(kTrainerModelFile);
    } else {
      for (const auto& e : fs::directory_iterator(input)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && name.ends_with(".safetensors")) m.shards.push_back(name);
      }
      std::sort(m.shards.begin(), m.shards.end());
      if (m.shards.empty()) return InvalidArgumentError(input + ": directory holds no .safetensors file");
    }
    const std::string config_path = (fs::path(input) / kConfigFile).string();
    if (fs::exists(config_path)) {
      FP8_ASSIGN_OR_RETURN(json config, ReadJsonFile(config_path));
      if (!config.is_object()) return InvalidArgumentError(config_path + ": not a JSON object");
      m.config = std::move(config);
    }
    std::set<std::string> shard_set(m.shards.begin(), m.shards.end());
    for (const auto& e : fs::directory_iterator(input)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || name.starts_with(".") || name == kIndexFile || name == kConfigFile ||
          name.ends_with(".safetensors"))
        continue;
      m.other_files.push_back(name);
    }
    std::sort(m.other_files.begin(), m.other_files.end());
  } else {
    return FailedPreconditionError("input: " + input + " is neither a file nor a directory");
  }

  for (size_t i = 0; i < m.shards.size(); ++i) {
    const std::string path = (fs::path(m.dir) / m.shards[i]).string();
    auto r = safetensors::Reader::Open(path);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kNotFound)
        return DataLossError(path + ": shard named in " + kIndexFile + " does not exist");
      return r.status();
    }
    for (const auto& t : r->tensors()) {
      FP8_RETURN_IF_ERROR(ValidateTensorName(t.name, path));
      if (!m.tensor_shard.emplace(t.name, i).second)
        return InvalidArgumentError(path + ": tensor \"" + t.name + "\" also appears in " +
                                    m.shards[m.tensor_shard[t.name]]);
    }
    m.total_bytes += r->file_size();
    m.readers.push_back(std::move(*r));
  }
  if (m.index) {
    // The index and the shards must agree, or a loader would look for tensors where they are not.
    const json& wm = (*m.index)["weight_map"];
    const std::string index_path = (fs::path(m.dir) / kIndexFile).string();
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      auto found = m.tensor_shard.find(it.key());
      if (found == m.tensor_shard.end() || m.shards[found->second] != it->get<std::string>())
        return InvalidArgumentError(index_path + ": tensor \"" + it.key() + "\" is not in shard " +
                                    it->get<std::string>());
    }
    for (const auto& [name, shard] : m.tensor_shard)
      if (!wm.contains(name))
        return InvalidArgumentError(index_path + ": tensor \"" + name + "\" of " + m.shards[shard] +
                                    " is missing from weight_map");
  }
  return m;
}

}  // namespace fp8::calibrate
