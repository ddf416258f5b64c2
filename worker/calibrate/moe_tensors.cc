// SPDX-License-Identifier: Apache-2.0
#include "worker/calibrate/moe_tensors.h"

#include <filesystem>

#include "worker/train/hf_moe_common.h"

namespace fp8::calibrate {

Status CheckMoeTensors(const ModelInput& in) {
  if (!in.config) return OkStatus();
  const std::string config_path = (std::filesystem::path(in.dir) / kConfigFile).string();
  StatusOr<std::vector<std::string>> names = train::HfMoeTensorNames(*in.config, config_path);
  // A layout field config.json gets wrong is bad input like a missing tensor (exit 65).
  if (!names.ok()) return InvalidArgumentError(names.status().message());
  for (const std::string& name : *names)
    if (!in.tensor_shard.count(name))
      return InvalidArgumentError(in.dir + ": missing tensor \"" + name + "\", which " + config_path + " (" +
                                  train::HfMoeFamilyOf(*in.config)->architecture + ") promises");
  return OkStatus();
}

}  // namespace fp8::calibrate
