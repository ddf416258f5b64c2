// SPDX-License-Identifier: Apache-2.0
// Reads the shared case table (spec_cases.json) for the worker-side and the API-side tests.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp8::spec_cases {

struct SpecCase {
  std::string kind;   // "train" | "calibrate"
  std::string rule;   // the rule id in jobspec/validate.cc
  std::string field;  // path below the spec
  nlohmann::json spec;  // the kind's minimal valid spec with the case's patch applied
  std::string expect;
  bool worker_binary = false;  // also run through the fp8-worker executable
};

inline nlohmann::json Table() {
  std::ifstream in(FP8_SPEC_CASES_JSON);
  return nlohmann::json::parse(in);
}

inline nlohmann::json Minimal(const std::string& kind) { return Table()["minimal"][kind]; }

inline std::vector<SpecCase> Load() {
  const nlohmann::json table = Table();
  std::vector<SpecCase> out;
  for (const auto& c : table["cases"]) {
    SpecCase sc;
    sc.kind = c["kind"];
    sc.rule = c["rule"];
    sc.field = c["field"];
    sc.spec = table["minimal"][sc.kind];
    sc.spec.merge_patch(c["patch"]);
    sc.expect = c["expect"];
    sc.worker_binary = c.value("worker_binary", false);
    out.push_back(std::move(sc));
  }
  return out;
}

}  // namespace fp8::spec_cases
