// SPDX-License-Identifier: Apache-2.0
// Path-ness is declared once, in job.proto: every string field of a job spec whose name says it
// is a path must carry `[(fp8d.v1.path) = ...]`, or fp8d and the worker would not check it.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>

#include <google/protobuf/descriptor.h>

#include "jobspec/paths.h"

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Names that say "path": *_dir, *_from, *_path, *_file, input, and every field of data specs.
bool LooksLikeAPath(const std::string& dotted) {
  static const std::regex kPath(R"((^|\.)(input|[a-z_]*_(dir|from|path|file))$|(^|\.)(data)(\.[a-z_]+)?$)");
  return std::regex_search(dotted, kPath);
}

void Walk(const Descriptor* d, const std::string& prefix, std::set<const Descriptor*>& seen,
          std::map<std::string, bool>* strings) {
  if (!seen.insert(d).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string name = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      (*strings)[name] = f->options().GetExtension(fp8d::v1::path) != fp8d::v1::PATH_KIND_UNSPECIFIED;
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
      Walk(f->message_type(), name, seen, strings);
    }
  }
  seen.erase(d);
}

TEST(PathFields, EveryPathLikeStringFieldOfASpecIsMarked) {
  for (const Descriptor* spec : {fp8d::v1::TrainSpec::descriptor(), fp8d::v1::CalibrateSpec::descriptor()}) {
    std::map<std::string, bool> strings;
    std::set<const Descriptor*> seen;
    Walk(spec, "", seen, &strings);
    int path_like = 0;
    for (const auto& [name, marked] : strings) {
      if (!LooksLikeAPath(name)) continue;
      ++path_like;
      EXPECT_TRUE(marked) << spec->name() << "." << name << " looks like a path but has no (fp8d.v1.path) option";
    }
    EXPECT_GE(path_like, 3) << spec->name();
  }
}

TEST(PathFields, TheWalkerFindsEachMarkedFieldWithItsKind) {
  using K = fp8d::v1::PathKind;
  const auto train = fp8::jobspec::PathFields(fp8d::v1::TrainSpec::descriptor());
  const std::vector<std::pair<std::string, K>> want_train = {
      {"data.train", fp8d::v1::INPUT_GLOB}, {"data.val", fp8d::v1::INPUT_GLOB},
      {"output_dir", fp8d::v1::OUTPUT_DIR}, {"init_from", fp8d::v1::INPUT_FILE_OR_DIR}};
  EXPECT_EQ(train, want_train);
  const auto calibrate = fp8::jobspec::PathFields(fp8d::v1::CalibrateSpec::descriptor());
  const std::vector<std::pair<std::string, K>> want_calibrate = {
      {"input", fp8d::v1::INPUT_FILE_OR_DIR}, {"output_dir", fp8d::v1::OUTPUT_DIR},
      {"activations.data", fp8d::v1::INPUT_GLOB}};
  EXPECT_EQ(calibrate, want_calibrate);
}

}  // namespace
