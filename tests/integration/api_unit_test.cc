// SPDX-License-Identifier: Apache-2.0
// In-process tests of the API edge's pure parts: request validation (daemon/api) and job-file
// parsing (client/). No daemon, no network; fast and deterministic.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "client/cli_habits.h"
#include "client/job_file.h"
#include "client/output.h"
#include "common/label_selector.h"
#include "daemon/api/status_mapping.h"
#include "daemon/api/job_isolation.h"
#include "daemon/api/validation.h"

namespace fp8d {
namespace {

using fp8d::v1::CreateJobRequest;

CreateJobRequest ValidRequest() {
  CreateJobRequest r;
  auto* t = r.mutable_job()->mutable_train();
  t->mutable_model()->set_preset("tiny");
  t->mutable_data()->set_train("/data/*.bin");
  t->mutable_precision()->set_recipe("fp8-blockwise");
  t->set_output_dir("/out");
  return r;
}

TEST(Validation, AcceptsAMinimalTrainJob) {
  EXPECT_TRUE(api::ValidateCreateJobRequest(ValidRequest()).ok());
}

TEST(Validation, AcceptsAMinimalCalibrateJob) {
  CreateJobRequest r;
  r.mutable_job()->mutable_calibrate()->set_input("/m.safetensors");
  r.mutable_job()->mutable_calibrate()->set_output_dir("/out");
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok());
}

// An empty preset is the default one (tiny, jobspec/defaults.h); explicit dimensions override it.
TEST(Validation, ModelWithoutPresetIsTheDefaultPresetOverridden) {
  CreateJobRequest r = ValidRequest();
  auto* m = r.mutable_job()->mutable_train()->mutable_model();
  m->set_preset("");
  m->set_n_head(2);
  m->set_d_model(64);
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok()) << api::ValidateCreateJobRequest(r).message();
  m->set_d_model(65);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(), "job.train.model.d_model: must be a multiple of n_head (2)");
  m->set_d_model(64);
  m->set_vocab_size(300000);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.train.model.vocab_size: ", 0), 0u);
}

TEST(Validation, InitFromIsCheckedAtCreate) {
  const std::string dir = ::testing::TempDir() + "/fp8d-init-from-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  CreateJobRequest r = ValidRequest();
  auto* t = r.mutable_job()->mutable_train();
  t->set_init_from(dir + "/absent");
  fp8::Status st = api::ValidateCreateJobRequest(r);
  EXPECT_EQ(st.message(), "job.train.model: must be left out with init_from (the shape comes from the model it names)");
  t->clear_model();
  // The filesystem is looked at with the paths, with the owner's rights (CheckJobPaths), not
  // by validation, which runs as fp8d.
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok()) << api::ValidateCreateJobRequest(r).message();
  const std::vector<std::string> roots = {"/"};
  st = api::CheckJobPaths(r.job(), roots, 0);
  EXPECT_EQ(st.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("job.train.init_from: no such directory", 0), 0u) << st.message();
  t->set_init_from(dir);
  EXPECT_EQ(api::CheckJobPaths(r.job(), roots, 0).message().rfind("job.train.init_from: ", 0), 0u);
  std::ofstream(dir + "/config.json") << "{}";
  EXPECT_TRUE(api::CheckJobPaths(r.job(), roots, 0).ok()) << api::CheckJobPaths(r.job(), roots, 0).message();
  t->mutable_training()->set_export_("onnx");
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.train.training.export: ", 0), 0u);
  std::filesystem::remove_all(dir);
}

// The output-dir admission keys on what the path check resolved (JobManager::CreateJob): a
// symlink alias of a folder must give that folder, and fields that share folders one answer.
TEST(Validation, ThePathCheckHandsBackTheOutputDirAsItResolved) {
  const std::string dir = ::testing::TempDir() + "/fp8d-resolved-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/real");
  std::filesystem::create_directory_symlink(dir + "/real", dir + "/alias");
  const std::string real = std::filesystem::canonical(dir + "/real").string();
  CreateJobRequest r = ValidRequest();
  auto* t = r.mutable_job()->mutable_train();
  t->mutable_data()->set_train(dir + "/alias/data/*.bin");
  t->set_output_dir(dir + "/alias/run-1");
  fp8::jobspec::ResolvedPaths resolved;
  const std::vector<std::string> roots = {"/"};
  ASSERT_TRUE(api::CheckJobPaths(r.job(), roots, 0, &resolved).ok());
  EXPECT_EQ(resolved.output_dir, real + "/run-1");
  EXPECT_EQ(resolved.output_dir, *fp8::jobspec::ResolvePath(t->output_dir()));
  // Refused: nothing is handed back.
  t->set_output_dir(dir + "/alias/run-2");
  resolved = {};
  EXPECT_FALSE(api::CheckJobPaths(r.job(), {real + "/elsewhere"}, 0, &resolved).ok());
  EXPECT_TRUE(resolved.output_dir.empty());
  t->clear_output_dir();
  ASSERT_TRUE(api::CheckJobPaths(r.job(), roots, 0, &resolved).ok());
  EXPECT_TRUE(resolved.output_dir.empty());
  std::filesystem::remove_all(dir);
}

TEST(Validation, MessagesStartWithTheFieldPath) {
  CreateJobRequest r = ValidRequest();
  r.mutable_job()->mutable_train()->mutable_training()->set_learning_rate(-1);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(),
            "job.train.training.learning_rate: must be in (0, 10]");
  r = ValidRequest();
  r.mutable_job()->mutable_resources()->set_ranks(1025);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(),
            "job.resources.ranks: must be between 1 and 1024");
  r = ValidRequest();
  r.mutable_job()->clear_train();
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(),
            "job: exactly one of train or calibrate must be set");
  r = ValidRequest();
  r.mutable_job()->mutable_retry()->mutable_initial_backoff()->set_seconds(10);
  r.mutable_job()->mutable_retry()->mutable_max_backoff()->set_seconds(5);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.retry.max_backoff", 0), 0u);
  r = ValidRequest();
  r.mutable_job()->set_kind(fp8d::v1::CALIBRATE);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.kind", 0), 0u);
}

TEST(Validation, DurationsBelowTheirFloorAreRefused) {
  auto r = ValidRequest();
  r.mutable_job()->mutable_timeouts()->mutable_heartbeat_timeout()->set_nanos(1);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(),
            "job.timeouts.heartbeat_timeout: must be 0 (the default) or at least 1s");
  r = ValidRequest();
  r.mutable_job()->mutable_timeouts()->mutable_progress_timeout()->set_nanos(999'999'999);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.timeouts.progress_timeout", 0), 0u);
  r = ValidRequest();
  r.mutable_job()->mutable_timeouts()->mutable_attempt_deadline()->set_nanos(5'000'000);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.timeouts.attempt_deadline", 0), 0u);
  r = ValidRequest();
  r.mutable_job()->mutable_retry()->mutable_initial_backoff()->set_nanos(1000);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(),
            "job.retry.initial_backoff: must be 0 (the default) or at least 10ms");
  // At the floor, and unset, are fine.
  r = ValidRequest();
  r.mutable_job()->mutable_timeouts()->mutable_heartbeat_timeout()->set_seconds(1);
  r.mutable_job()->mutable_retry()->mutable_initial_backoff()->set_nanos(10'000'000);
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok()) << api::ValidateCreateJobRequest(r).message();
}

TEST(Validation, JobNames) {
  EXPECT_TRUE(api::ValidateJobName("jobs/abc-1_2.x", "name").ok());
  for (const char* bad : {"", "jobs/", "abc", "job/abc", "jobs/a b", "jobs/a/b"}) {
    fp8::Status st = api::ValidateJobName(bad, "name");
    EXPECT_EQ(st.code(), fp8::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.message().rfind("name: ", 0), 0u) << st.message();
  }
}

TEST(Validation, RanksNodesAndRanksPerNodeAgree) {
  CreateJobRequest r = ValidRequest();
  auto* res = r.mutable_job()->mutable_resources();
  res->set_nodes(2);
  res->set_ranks_per_node(3);
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok());
  res->set_ranks(6);
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok());
  res->set_ranks(4);
  fp8::Status st = api::ValidateCreateJobRequest(r);
  EXPECT_EQ(st.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("job.resources.ranks", 0), 0u) << st.message();
  res->set_ranks(0);
  res->set_nodes(-1);
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.resources.nodes", 0), 0u);
  res->set_nodes(0);
  res->set_ranks(5);
  res->set_ranks_per_node(2);  // 5 ranks cannot fill nodes of 2
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.resources.ranks", 0), 0u);
}

TEST(Validation, SlurmNamesArePrintableWithoutSpaces) {
  CreateJobRequest r = ValidRequest();
  r.mutable_job()->mutable_resources()->mutable_slurm()->set_partition("gpu-h100");
  r.mutable_job()->mutable_resources()->mutable_slurm()->set_constraint("h100&ib");
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok());
  r.mutable_job()->mutable_resources()->mutable_slurm()->set_partition("gpu --exclusive");
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message().rfind("job.resources.slurm.partition", 0), 0u);
}

TEST(StatusMapping, IsOneToOne) {
  for (int code = 0; code <= 16; ++code) {
    fp8::Status st(static_cast<fp8::StatusCode>(code), "m");
    EXPECT_EQ(static_cast<int>(api::ToGrpcStatus(st).error_code()), code);
  }
}

TEST(Durations, ParsesUnitsAndCombinations) {
  struct Case {
    const char* text;
    int64_t seconds;
    int32_t nanos;
  };
  for (const Case& c : {Case{"500ms", 0, 500000000}, Case{"1s", 1, 0}, Case{"1.5s", 1, 500000000},
                        Case{"30m", 1800, 0}, Case{"2h", 7200, 0}, Case{"1h30m", 5400, 0},
                        Case{"100us", 0, 100000}, Case{"0", 0, 0}, Case{"90", 90, 0}}) {
    auto d = client::ParseDuration(c.text);
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.status().ToString();
    EXPECT_EQ(d->seconds(), c.seconds) << c.text;
    EXPECT_EQ(d->nanos(), c.nanos) << c.text;
  }
  for (const char* bad : {"", "-1s", "5x", "s", "1s2"}) {
    EXPECT_FALSE(client::ParseDuration(bad).ok()) << bad;
  }
}

TEST(JobFile, YamlBecomesAJobWithAbsolutePathsAndDurations) {
  auto job = client::ParseJobText(
      "display_name: demo\n"
      "train: {model: {preset: tiny}, data: {train: \"data/*.bin\"}, precision: {recipe: fp8-blockwise},"
      " training: {max_steps: 200, save_steps: 50, learning_rate: 3e-4}, output_dir: out/demo}\n"
      "resources: {ranks: 1}\n"
      "labels: {team: \"42\"}\n"
      "retry: {max_attempts: 3, initial_backoff: 1s, max_backoff: 60s}\n"
      "timeouts: {attempt_deadline: 2h, heartbeat_timeout: 30s, progress_timeout: 300s}\n",
      "/base/dir");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->display_name(), "demo");
  EXPECT_EQ(job->train().data().train(), "/base/dir/data/*.bin");
  EXPECT_EQ(job->train().output_dir(), "/base/dir/out/demo");
  EXPECT_EQ(job->train().training().max_steps(), 200);
  EXPECT_DOUBLE_EQ(job->train().training().learning_rate(), 3e-4);
  EXPECT_EQ(job->labels().at("team"), "42");
  EXPECT_EQ(job->retry().max_backoff().seconds(), 60);
  EXPECT_EQ(job->timeouts().attempt_deadline().seconds(), 7200);
  EXPECT_TRUE(api::ValidateCreateJobRequest([&] {
                CreateJobRequest r;
                *r.mutable_job() = *job;
                return r;
              }()).ok());
}

TEST(JobFile, JsonIsAcceptedAndAbsolutePathsAreKept) {
  auto job = client::ParseJobText(
      R"({"calibrate": {"input": "/models/m", "output_dir": "rel/out", "weights": {"granularity": "block"}}})",
      "/b");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->calibrate().input(), "/models/m");
  EXPECT_EQ(job->calibrate().output_dir(), "/b/rel/out");
}

// fp8ctl writes a job file's message in the wire format itself (client/job_file.cc): the result
// must be the message the proto JSON mapping gives for the same document, for every kind of
// field the Job has.
TEST(JobFile, WireEncodingMatchesTheProtoJsonMapping) {
  const std::string yaml =
      "display_name: \"all kinds\"\n"
      "priority: -7\n"
      "labels: {team: fp8, \"n\": \"12\"}\n"
      "env: {A_B: \"x y\"}\n"
      "train:\n"
      "  model: {preset: tiny, n_layer: 2, d_model: 64}\n"
      "  data: {train: /d/train.bin, val: /d/val.bin}\n"
      "  training: {max_steps: 9000000000, learning_rate: 3.0e-4, adam_beta2: 0.95, seed: -3,"
      " adam_epsilon: null}\n"
      "  output_dir: /o\n"
      "resources: {ranks: 2}\n"
      "retry: {max_attempts: 4, initial_backoff: 1.5s, max_backoff: 2m, multiplier: 2, jitter: 0.25}\n"
      "timeouts: {heartbeat_timeout: 1h30m}\n"
      "state: RUNNING\n"
      "attempt: 3\n"
      "progress: {step: 5, loss: -0.5, fp8_amax_max: 0, update_time: \"2026-12-01T10:00:00.5Z\"}\n"
      "error: {code: 13, failure_class: 2}\n"
      "result: {tensors: 12, ok: true, none: null, names: [a, \"1\", 2.5], nested: {x: [1, {y: z}]}}\n"
      "create_time: \"2026-12-01T10:00:00+01:00\"\n"
      "version: 42\n"
      "attempts:\n"
      "  - {number: 1, ranks: [{rank: 0, node: n1, gpu: -1, pid: 123}, {rank: 1}], controller_fault: true}\n"
      "  - number: 2\n"
      "events: {version: 1, to_state: QUEUED, message: created}\n"
      "run_as_uid: 1000\n";
  const std::string json = R"({
    "display_name": "all kinds", "priority": -7, "labels": {"team": "fp8", "n": "12"}, "env": {"A_B": "x y"},
    "train": {"model": {"preset": "tiny", "n_layer": 2, "d_model": 64},
              "data": {"train": "/d/train.bin", "val": "/d/val.bin"},
              "training": {"max_steps": "9000000000", "learning_rate": 3.0e-4, "adam_beta2": 0.95, "seed": "-3"},
              "output_dir": "/o"},
    "resources": {"ranks": 2},
    "retry": {"max_attempts": 4, "initial_backoff": "1.5s", "max_backoff": "120s", "multiplier": 2, "jitter": 0.25},
    "timeouts": {"heartbeat_timeout": "5400s"},
    "state": "RUNNING", "attempt": 3,
    "progress": {"step": "5", "loss": -0.5, "fp8_amax_max": 0, "update_time": "2026-12-01T10:00:00.5Z"},
    "error": {"code": 13, "failure_class": 2},
    "result": {"tensors": 12, "ok": true, "none": null, "names": ["a", "1", 2.5], "nested": {"x": [1, {"y": "z"}]}},
    "create_time": "2026-12-01T10:00:00+01:00", "version": "42",
    "attempts": [{"number": 1, "ranks": [{"rank": 0, "node": "n1", "gpu": -1, "pid": "123"}, {"rank": 1}],
                  "controller_fault": true}, {"number": 2}],
    "events": [{"version": "1", "to_state": "QUEUED", "message": "created"}],
    "run_as_uid": "1000"})";
  auto job = client::ParseJobText(yaml, "/");  // a null (adam_epsilon) leaves the field unset
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  fp8d::v1::Job expected;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &expected).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*job, expected))
      << "wire:\n" << job->DebugString() << "\njson:\n" << expected.DebugString();
  EXPECT_TRUE(job->progress().has_fp8_amax_max());
  EXPECT_FALSE(job->progress().has_fp8_saturation_fraction());
}

TEST(JobFile, AnchorsAndAliasesAreExpandedAndKeysStayApart) {
  auto job = client::ParseJobText("labels: &l {a: x, b: y, c: z}\nenv: *l\ndisplay_name: &n demo\n"
                                  "train: {output_dir: *n}\n", "/");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->labels().size(), 3u);
  EXPECT_EQ(job->labels().at("b"), "y");
  EXPECT_EQ(job->env().at("c"), "z");
  EXPECT_EQ(job->train().output_dir(), "/demo");
}

TEST(JobFile, RefusesWhatTheWireFormatWouldHideOrBreak) {
  auto two_specs = client::ParseJobText("train: {output_dir: /o}\ncalibrate: {input: /m}\n", "/");
  EXPECT_EQ(two_specs.status().message(), "job.calibrate: only one of train and calibrate may be set (line 2, column 1)");
  auto big_int32 = client::ParseJobText("priority: 3000000000\n", "/");
  EXPECT_EQ(big_int32.status().message(), "job.priority: out of range for a 32-bit integer");
  auto bad_time = client::ParseJobText("create_time: yesterday\n", "/");
  EXPECT_EQ(bad_time.status().message(), "job.create_time: expected an RFC 3339 timestamp");
  auto bad_enum = client::ParseJobText("state: 99\n", "/");
  EXPECT_EQ(bad_enum.status().message(), "job.state: unknown value \"99\"");
}

TEST(JobFile, ErrorsNameTheField) {
  auto unknown = client::ParseJobText("train: {training: {max_stepz: 5}}\n", "/");
  EXPECT_EQ(unknown.status().message(), "job.train.training.max_stepz: unknown field (line 1, column 20)");
  auto type = client::ParseJobText("train: {training: {max_steps: many}}\n", "/");
  EXPECT_EQ(type.status().message().rfind("job.train.training.max_steps", 0), 0u) << type.status().message();
  auto duration = client::ParseJobText("timeouts: {heartbeat_timeout: soon}\n", "/");
  EXPECT_EQ(duration.status().message().rfind("job.timeouts.heartbeat_timeout", 0), 0u);
  auto not_map = client::ParseJobText("- a\n- b\n", "/");
  EXPECT_EQ(not_map.status().code(), fp8::StatusCode::kInvalidArgument);
}

TEST(LabelSelector, ParsesAndMatchesAsKubectl) {
  auto sel = fp8::ParseLabelSelector("team=nlp, tier!=gold,owner,!temp");
  ASSERT_TRUE(sel.ok()) << sel.status().ToString();
  ASSERT_EQ(sel->size(), 4u);
  EXPECT_TRUE(fp8::MatchesLabels(*sel, {{"team", "nlp"}, {"owner", "ann"}}));
  EXPECT_TRUE(fp8::MatchesLabels(*sel, {{"team", "nlp"}, {"owner", "ann"}, {"tier", "silver"}}));
  EXPECT_FALSE(fp8::MatchesLabels(*sel, {{"team", "nlp"}, {"owner", "ann"}, {"tier", "gold"}}));
  EXPECT_FALSE(fp8::MatchesLabels(*sel, {{"team", "nlp"}}));
  EXPECT_FALSE(fp8::MatchesLabels(*sel, {{"team", "nlp"}, {"owner", "ann"}, {"temp", "1"}}));
  EXPECT_TRUE(fp8::ParseLabelSelector("").ok());
  EXPECT_TRUE(fp8::ParseLabelSelector("a==b")->at(0).value == "b");
  for (const char* bad : {"a=b=c", ",", "a,,b", "=x", "!", "a b=c"}) {
    auto st = fp8::ParseLabelSelector(bad).status();
    EXPECT_EQ(st.code(), fp8::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.message().rfind("label_selector: ", 0), 0u) << st.message();
  }
  fp8d::v1::ListJobsRequest list;
  list.set_label_selector("a=b=c");
  EXPECT_EQ(api::ValidateListJobsRequest(list).message().rfind("label_selector", 0), 0u);
}

TEST(CliHabits, SuggestionsStatesAndLabels) {
  const std::vector<std::string> commands = {"submit", "get", "list", "watch", "wait", "logs", "cancel", "delete", "describe"};
  EXPECT_EQ(client::SuggestCommand("lst", commands), "list");
  EXPECT_EQ(client::SuggestCommand("sbumit", commands), "submit");
  EXPECT_EQ(client::SuggestCommand("desc", commands), "describe");
  EXPECT_EQ(client::SuggestCommand("frobnicate", commands), "");
  EXPECT_EQ(*client::ParseStateFlag("running"), fp8d::v1::RUNNING);
  EXPECT_EQ(*client::ParseStateFlag("Retry_Wait"), fp8d::v1::RETRY_WAIT);
  auto bad = client::ParseStateFlag("JOB_STATE_UNSPECIFIED");
  EXPECT_EQ(bad.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("valid states: QUEUED,"), std::string::npos);
  EXPECT_EQ(client::ParseLabelFlags({"=x"}).status().message(), "--label =x: expected KEY=VALUE");
  EXPECT_EQ(client::ParseLabelFlags({"a=b", "c="})->at("c"), "");
}

TEST(Durations, MalformedNumbersAreRefused) {
  for (const char* bad : {"1.5.5s", "1..5s", ".s", "5s.", "1e3s"}) {
    EXPECT_FALSE(client::ParseDuration(bad).ok()) << bad;
  }
  EXPECT_EQ(client::ParseDuration("1.5s")->nanos(), 500000000);
}

TEST(JobFile, OutputOnlyFieldsAreClearedAndNamed) {
  auto job = client::ParseJobText("name: jobs/x\nversion: 3\ntrain: {output_dir: /o}\n", "/");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(client::ClearOutputOnlyFields(*job), (std::vector<std::string>{"name", "version"}));
  EXPECT_EQ(job->name(), "");
  EXPECT_EQ(job->train().output_dir(), "/o");
}

TEST(Output, CalibrationShowsItsResultNotLossAndTokens) {
  fp8d::v1::Job job;
  job.set_name("jobs/cal");
  job.set_kind(fp8d::v1::CALIBRATE);
  job.set_state(fp8d::v1::SUCCEEDED);
  auto& fields = *job.mutable_result()->mutable_fields();
  fields["tensors_converted"].set_number_value(42);
  fields["max_rel_error"].set_number_value(0.0123456);
  fields["output_dir"].set_string_value("/models/out-fp8");
  std::ostringstream out;
  client::PrintJob(job, client::OutputFormat::kTable, out);
  EXPECT_NE(out.str().find("Tensors converted:"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("42\n"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("0.01235"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("/models/out-fp8"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("Loss"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find("Tokens/s"), std::string::npos) << out.str();
}

TEST(Output, AnMoeJobShowsItsExpertLoadAndADenseOneDoesNot) {
  fp8d::v1::Job job;
  job.set_name("jobs/moe");
  job.set_kind(fp8d::v1::TRAIN);
  job.set_state(fp8d::v1::RUNNING);
  job.mutable_progress()->set_step(40);
  job.mutable_progress()->set_loss(2.5);
  std::ostringstream dense;
  client::PrintJob(job, client::OutputFormat::kTable, dense);
  EXPECT_EQ(dense.str().find("Expert load"), std::string::npos) << dense.str();
  EXPECT_EQ(dense.str().find("Aux loss"), std::string::npos) << dense.str();
  fp8d::v1::Progress& p = *job.mutable_progress();
  p.set_moe_load_min(0.8125);
  p.set_moe_load_max(1.25);
  p.set_moe_load_cv(0.2049);
  p.set_moe_dropped_fraction(0.0125);
  p.set_moe_aux_loss(0.01012);
  std::ostringstream moe;
  client::PrintJob(job, client::OutputFormat::kTable, moe);
  EXPECT_NE(moe.str().find("0.81 .. 1.25 × mean, CV 0.205"), std::string::npos) << moe.str();
  EXPECT_NE(moe.str().find("1.25%"), std::string::npos) << moe.str();
  EXPECT_NE(moe.str().find("0.0101"), std::string::npos) << moe.str();
}

TEST(Output, CancelledReadsCancelledAndTheFirstEventHasNoFrom) {
  fp8d::v1::Job job;
  job.set_name("jobs/c");
  job.set_kind(fp8d::v1::TRAIN);
  job.set_state(fp8d::v1::CANCELLED);
  job.mutable_error()->set_code(1);
  job.mutable_error()->set_message("cancelled by request");
  EXPECT_EQ(client::ErrorText(job), "cancelled: cancelled by request");
  auto* first = job.add_events();
  first->set_version(1);
  first->set_to_state(fp8d::v1::QUEUED);
  std::ostringstream out;
  client::PrintDescribe(job, client::OutputFormat::kTable, out);
  EXPECT_EQ(out.str().find("UNSPECIFIED"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("QUEUED"), std::string::npos) << out.str();
  std::ostringstream name;
  client::PrintJob(job, client::OutputFormat::kName, name);
  EXPECT_EQ(name.str(), "jobs/c\n");
  EXPECT_EQ(client::MessageToJsonLine(job).find('\n'), std::string::npos);
}

TEST(Output, ProgressLineFitsTheTerminal) {
  fp8d::v1::Job job;
  job.set_name("jobs/0123456789abcdef");
  job.set_state(fp8d::v1::RUNNING);
  job.mutable_progress()->set_step(5);
  job.mutable_progress()->set_total_steps(100000);
  job.mutable_progress()->set_loss(2.5);
  job.mutable_progress()->set_tokens_per_second(1234);
  job.mutable_progress()->set_eta_seconds(3600);
  for (int columns : {20, 40, 60, 80, 160, 300}) {
    const std::string line = client::FitProgressLine(job, columns);
    EXPECT_LT(static_cast<int>(line.size()), columns) << columns << ": " << line;
  }
  EXPECT_NE(client::FitProgressLine(job, 160).find(" [...."), std::string::npos);
  EXPECT_EQ(client::FitProgressLine(job, 60).find("["), std::string::npos);
}

// depends_on: the form of each entry and the count at the edge, naming the entry; whether the
// jobs exist and may be depended on is the manager's and the owner rule's (dependencies tests).
TEST(Validation, DependsOnEntriesAreJobNames) {
  CreateJobRequest r = ValidRequest();
  r.mutable_job()->add_depends_on("jobs/1");
  r.mutable_job()->add_depends_on("jobs/a-b.c");
  EXPECT_TRUE(api::ValidateCreateJobRequest(r).ok()) << api::ValidateCreateJobRequest(r).message();
  r.mutable_job()->add_depends_on("1");
  fp8::Status st = api::ValidateCreateJobRequest(r);
  EXPECT_EQ(st.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "job.depends_on[2]: must have the form jobs/<id>");
  r.mutable_job()->set_depends_on(2, "jobs/a b");
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(),
            "job.depends_on[2]: must have the form jobs/<id> with id of [A-Za-z0-9._-]");
  r.mutable_job()->clear_depends_on();
  for (int i = 0; i < 65; ++i) r.mutable_job()->add_depends_on("jobs/" + std::to_string(i));
  EXPECT_EQ(api::ValidateCreateJobRequest(r).message(), "job.depends_on: at most 64 dependencies, got 65");
}

TEST(JobFile, DependsOnComesFromTheYaml) {
  auto job = client::ParseJobText("depends_on: [jobs/7, jobs/8]\ncalibrate: {input: /m, output_dir: /o}\n", "/");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->depends_on_size(), 2);
  EXPECT_EQ(job->depends_on(0), "jobs/7");
  EXPECT_EQ(job->depends_on(1), "jobs/8");
  EXPECT_TRUE(client::ClearOutputOnlyFields(*job).empty()) << "depends_on is an input";
}

TEST(Output, UsageTableNamesItsKeyColumnAndTotals) {
  fp8d::v1::GetUsageResponse usage;
  auto* row = usage.add_rows();
  row->set_key("team-a");
  row->set_gpu_seconds(7200);
  row->set_cpu_slot_seconds(90);
  row->set_attempts(3);
  usage.mutable_until()->set_seconds(1764600000);
  std::ostringstream out;
  client::PrintUsage(usage, "queue", client::OutputFormat::kTable, out);
  EXPECT_EQ(out.str().rfind("QUEUE ", 0), 0u) << out.str();
  EXPECT_NE(out.str().find("7200"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("2.00"), std::string::npos) << "GPU-hours: " << out.str();
  EXPECT_NE(out.str().find("total: 7200 GPU-seconds, 90 CPU-slot-seconds; from the first stored attempt"),
            std::string::npos)
      << out.str();
  std::ostringstream names;
  client::PrintUsage(usage, "queue", client::OutputFormat::kName, names);
  EXPECT_EQ(names.str(), "team-a\n");
}

TEST(Output, GetShowsDependenciesAndWhyTheJobWaits) {
  fp8d::v1::Job job;
  job.set_name("jobs/3");
  job.set_state(fp8d::v1::QUEUED);
  job.add_depends_on("jobs/1");
  job.add_depends_on("jobs/2");
  job.set_pending_reason("waiting for jobs/2");
  std::ostringstream out;
  client::PrintJob(job, client::OutputFormat::kTable, out);
  EXPECT_NE(out.str().find("Depends on:"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("jobs/1, jobs/2\n"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("Pending reason:"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("waiting for jobs/2\n"), std::string::npos) << out.str();
  std::ostringstream plain;
  job.clear_depends_on();
  job.clear_pending_reason();
  client::PrintJob(job, client::OutputFormat::kTable, plain);
  EXPECT_EQ(plain.str().find("Depends on"), std::string::npos) << plain.str();
  EXPECT_EQ(plain.str().find("Pending reason"), std::string::npos) << plain.str();
}

}  // namespace
}  // namespace fp8d
