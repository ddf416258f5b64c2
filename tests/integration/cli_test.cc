// SPDX-License-Identifier: Apache-2.0
// fp8ctl and fp8d as operators use them (issue 19), with real processes: daemon flags that
// used to misconfigure in silence, CLI habits (version, help, did-you-mean, completion, label
// selectors, -o name, --parsable, NDJSON, wait, delete), output that reads right, admission
// checks (backend cuda without a GPU, an output_dir in use), hostile job files (issue 14 item
// 5) and garbage request bytes on every method (issue 14 item 6). Messages are matched by
// substring, exit codes exactly.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <sstream>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/daemon_test.h"

namespace fp8d::itest {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class CliTest : public DaemonTest {
 protected:
  void StartDaemon(DaemonOptions options = {}) {
    if (options.env.find("FP8_TEST_STEP_MS") == options.env.end()) options.env["FP8_TEST_STEP_MS"] = "20";
    DaemonTest::StartDaemon(std::move(options));
  }
  // Writes a job file under the test's temp dir and returns its path.
  std::string JobFile(const std::string& name, const std::string& text) {
    const std::string dir = tmp_.path() + "/files";
    fs::create_directories(dir);
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::string TrainYaml(const std::string& output_dir, int steps, const std::string& extra = "") {
    return "train:\n  model: {preset: tiny}\n  data: {train: d}\n  precision: {recipe: bf16}\n"
           "  training: {max_steps: " + std::to_string(steps) + "}\n  output_dir: " + output_dir +
           "\n  backend: cpu\n" + extra;
  }
  ProcessResult Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {Fp8ctlPath(), "--server", daemon_ ? daemon_->address() : "127.0.0.1:1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv);
  }
};

// ---------------------------------------------------------------------------- fp8d flags

TEST(DaemonFlags, VersionUnknownLogLevelAndWorkerArgWithoutWorker) {
  TempDir tmp;
  ProcessResult version = RunProcess({Fp8dPath(), "--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_TRUE(Contains(version.out, "fp8d ")) << version.out;
  EXPECT_TRUE(Contains(version.out, "commit ")) << version.out;
  EXPECT_TRUE(Contains(version.out, " build)")) << version.out;

  ProcessResult level = RunProcess({Fp8dPath(), "--data-dir", tmp.path(), "--listen", "127.0.0.1:0",
                                    "--log-level", "verbose"});
  EXPECT_EQ(level.exit_code, 2) << level.err;
  EXPECT_TRUE(Contains(level.err, "--log-level verbose")) << level.err;
  EXPECT_TRUE(Contains(level.err, "trace, debug, info, warn, error")) << level.err;

  ProcessResult worker_arg = RunProcess({Fp8dPath(), "--data-dir", tmp.path(), "--listen", "127.0.0.1:0",
                                         "--worker-arg", "--foo"});
  EXPECT_EQ(worker_arg.exit_code, 2) << worker_arg.err;
  EXPECT_TRUE(Contains(worker_arg.err, "--worker-arg needs --worker")) << worker_arg.err;

  ProcessResult ttl = RunProcess({Fp8dPath(), "--data-dir", tmp.path(), "--listen", "127.0.0.1:0",
                                  "--job-ttl-after-finished", "1.5x"});
  EXPECT_EQ(ttl.exit_code, 2) << ttl.err;
  EXPECT_TRUE(Contains(ttl.err, "--job-ttl-after-finished 1.5x")) << ttl.err;

  // The same checks hold for the config file's keys.
  std::ofstream(tmp.path() + "/loud.yaml") << "log_level: loud\n";
  ProcessResult config_level = RunProcess({Fp8dPath(), "--data-dir", tmp.path(), "--listen", "127.0.0.1:0",
                                           "--config", tmp.path() + "/loud.yaml"});
  EXPECT_EQ(config_level.exit_code, 2) << config_level.err;
  EXPECT_TRUE(Contains(config_level.err, "--log-level loud: unknown level; valid levels: trace")) << config_level.err;
  std::ofstream(tmp.path() + "/ttl.yaml") << "job_ttl_after_finished: 7 days\n";
  ProcessResult config_ttl = RunProcess({Fp8dPath(), "--data-dir", tmp.path(), "--listen", "127.0.0.1:0",
                                         "--config", tmp.path() + "/ttl.yaml"});
  EXPECT_EQ(config_ttl.exit_code, 2) << config_ttl.err;
  EXPECT_TRUE(Contains(config_ttl.err, "config key job_ttl_after_finished 7 days")) << config_ttl.err;
}

// ----------------------------------------------------------------------- CLI habits (no daemon)

TEST(CliHabits, VersionHelpDidYouMeanAndCompletion) {
  const std::string ctl = Fp8ctlPath();
  ProcessResult version = RunProcess({ctl, "version", "--client"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(Contains(version.out, "fp8ctl ") && Contains(version.out, "commit ")) << version.out;
  EXPECT_FALSE(Contains(version.out, "server")) << version.out;

  ProcessResult typo = RunProcess({ctl, "lst"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_TRUE(Contains(typo.err, "unknown command 'lst', did you mean 'list'?")) << typo.err;
  ProcessResult typo_after_flag = RunProcess({ctl, "--server", "127.0.0.1:1", "sbumit"});
  EXPECT_EQ(typo_after_flag.exit_code, 2);
  EXPECT_TRUE(Contains(typo_after_flag.err, "did you mean 'submit'?")) << typo_after_flag.err;

  ProcessResult help = RunProcess({ctl, "help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(Contains(help.out, "submit") && Contains(help.out, "completion")) << help.out;
  ProcessResult help_submit = RunProcess({ctl, "help", "submit"});
  EXPECT_EQ(help_submit.exit_code, 0);
  EXPECT_TRUE(Contains(help_submit.out, "--parsable")) << help_submit.out;
  ProcessResult help_typo = RunProcess({ctl, "help", "delet"});
  EXPECT_EQ(help_typo.exit_code, 2);
  EXPECT_TRUE(Contains(help_typo.err, "did you mean 'delete'?")) << help_typo.err;

  TempDir tmp;
  for (const std::string shell : {"bash", "zsh"}) {
    ProcessResult script = RunProcess({ctl, "completion", shell});
    ASSERT_EQ(script.exit_code, 0) << shell;
    EXPECT_TRUE(Contains(script.out, "complete -F _fp8ctl fp8ctl")) << script.out;
    EXPECT_TRUE(Contains(script.out, "--selector")) << script.out;
    if (shell == "bash") {
      // The script parses, and completes the first word and a subcommand's flags.
      std::ofstream(tmp.path() + "/c.sh") << script.out;
      ProcessResult run = RunProcess(
          {"/bin/bash", "-c",
           "source " + tmp.path() + "/c.sh; COMP_WORDS=(fp8ctl su); COMP_CWORD=1; _fp8ctl; echo \"${COMPREPLY[*]}\";"
           " COMP_WORDS=(fp8ctl submit --pa); COMP_CWORD=2; _fp8ctl; echo \"${COMPREPLY[*]}\""});
      EXPECT_EQ(run.exit_code, 0) << run.err;
      EXPECT_EQ(run.out, "submit\n--parsable\n");
    }
  }
  ProcessResult bad_shell = RunProcess({ctl, "completion", "fish"});
  EXPECT_EQ(bad_shell.exit_code, 2);

  ProcessResult bad_state = RunProcess({ctl, "--server", "127.0.0.1:1", "list", "--state", "runing"});
  EXPECT_EQ(bad_state.exit_code, 2);
  EXPECT_TRUE(Contains(bad_state.err, "valid states: QUEUED, STARTING, RUNNING, SUCCEEDED")) << bad_state.err;
  ProcessResult bad_for = RunProcess({ctl, "--server", "127.0.0.1:1", "wait", "x", "--for", "state=DONE"});
  EXPECT_EQ(bad_for.exit_code, 2);
  EXPECT_TRUE(Contains(bad_for.err, "valid states")) << bad_for.err;
}

TEST(CliHabits, WatchFailsFastAgainstAnUnreachableServer) {
  const auto start = std::chrono::steady_clock::now();
  ProcessResult watch = RunProcess({Fp8ctlPath(), "--server", "127.0.0.1:1", "watch", "jobs/x"});
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(watch.exit_code, 3);
  EXPECT_TRUE(Contains(watch.err, "cannot reach fp8d at 127.0.0.1:1")) << watch.err;
  EXPECT_LT(seconds, 10.0) << "the issue's bound: a few seconds, not 60";
}

// ------------------------------------------------------------------------- hostile job files

TEST(HostileJobFiles, EachExitsTwoWithAMessage) {
  TempDir tmp;
  std::string bomb = "result:\n  a: &a [x, x, x, x, x, x, x, x, x]\n";
  const char* prev = "a";
  for (const char* name : {"b", "c", "d", "e", "f", "g", "h"}) {
    bomb += std::string("  ") + name + ": &" + name + " [";
    for (int i = 0; i < 9; ++i) bomb += std::string(i ? ", " : "") + "*" + prev;
    bomb += "]\n";
    prev = name;
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {bomb, "expands to more than 100000 nodes"},
      {"result: &x\n  a: *x\n", "levels deep"},
      {"result: &x [*x]\n", "levels deep"},
      {"display_name: \"\xff\xfe\"\n", "invalid UTF-8 at line 1, column 16"},
      {"? [a, b]\n: 1\n", "a key must be a plain string"},
      {"labels:\n  ? {a: 1}\n  : x\n", "a key must be a plain string"},
      {"display_name: a\ndisplay_name: b\n", "job.display_name: duplicate key (line 2"},
      {"{\"display_name\": \"a\"} trailing\n", "job file (JSON): parse error at line 1, column"},
      {"{\"display_name\": \"a\", \"display_name\": \"b\"}", "duplicate key \"display_name\""},
      {"display_name: a\n---\ndisplay_name: b\n", "holds more than one YAML document"},
      {" ,a[]", "holds more than one YAML document"},  // yaml-cpp's LoadAll loops forever on it
      {"timeouts:\n  attempt_deadline: 1.5.5s\n", "duration \"1.5.5s\": bad number"},
      {"train: [\n", "job file: line 2, column 1"},
  };
  int i = 0;
  for (const auto& [text, message] : cases) {
    const std::string path = tmp.path() + "/case" + std::to_string(i++) + ".yaml";
    std::ofstream(path, std::ios::binary) << text;
    ProcessResult r = RunProcess({Fp8ctlPath(), "--server", "127.0.0.1:1", "submit", "-f", path},
                                 {}, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 2) << text << "\n" << r.err;
    EXPECT_TRUE(Contains(r.err, message)) << "want \"" << message << "\" in: " << r.err;
  }
}

// ------------------------------------------------------------- with a daemon: labels, output

TEST_F(CliTest, LabelsNameOutputParsableNdjsonWaitAndDelete) {
  StartDaemon();
  const std::string a = JobFile("a.yaml", TrainYaml(Out("a"), 5));
  const std::string b = JobFile("b.yaml", TrainYaml(Out("b"), 5));

  ProcessResult parsable = Ctl({"submit", "-f", a, "--parsable", "--label", "team=nlp", "--label", "tier=gold"});
  ASSERT_EQ(parsable.exit_code, 0) << parsable.err;
  const std::string id_a = parsable.out.substr(0, parsable.out.find('\n'));
  EXPECT_EQ(parsable.out, id_a + "\n");
  EXPECT_EQ(id_a.find('/'), std::string::npos) << "sbatch --parsable prints the bare id";

  ProcessResult named = Ctl({"submit", "-f", b, "-o", "name", "--label", "team=vision"});
  ASSERT_EQ(named.exit_code, 0) << named.err;
  const std::string name_b = named.out.substr(0, named.out.find('\n'));
  EXPECT_EQ(named.out, name_b + "\n");
  EXPECT_EQ(name_b.rfind("jobs/", 0), 0u);

  // wait --for state=SUCCEEDED, then label selectors and -o name.
  ProcessResult waited = Ctl({"wait", id_a, "--for", "state=succeeded", "--timeout", "60s"});
  EXPECT_EQ(waited.exit_code, 0) << waited.err;
  ASSERT_EQ(Ctl({"wait", name_b, "--for", "state=SUCCEEDED", "--timeout", "60s"}).exit_code, 0);
  EXPECT_EQ(Ctl({"list", "-o", "name", "-l", "team=nlp"}).out, "jobs/" + id_a + "\n");
  EXPECT_EQ(Ctl({"list", "-o", "name", "-l", "team!=nlp"}).out, name_b + "\n");
  EXPECT_EQ(Ctl({"list", "-o", "name", "-l", "team,!tier"}).out, name_b + "\n");
  EXPECT_EQ(Ctl({"list", "-o", "name", "-l", "team=nlp,tier=gold", "--state", "Succeeded"}).out, "jobs/" + id_a + "\n");
  EXPECT_EQ(Ctl({"list", "-o", "name", "-l", "team=none"}).out, "");
  ProcessResult bad_selector = Ctl({"list", "-l", "team=a=b"});
  EXPECT_EQ(bad_selector.exit_code, 2);
  EXPECT_TRUE(Contains(bad_selector.err, "label_selector")) << bad_selector.err;

  // wait on a job that ended otherwise: exit 1 with the reason.
  ProcessResult wrong = Ctl({"wait", id_a, "--for", "state=FAILED", "--timeout", "30s"});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(Contains(wrong.err, "ended SUCCEEDED, not FAILED")) << wrong.err;

  // watch -o json: NDJSON, every line one object.
  ProcessResult ndjson = Ctl({"watch", id_a, "-o", "json"});
  EXPECT_EQ(ndjson.exit_code, 0) << ndjson.err;
  std::istringstream lines(ndjson.out);
  std::string line;
  int objects = 0;
  while (std::getline(lines, line)) {
    ASSERT_NO_THROW(json::parse(line)) << line;
    EXPECT_TRUE(json::parse(line).is_object());
    ++objects;
  }
  EXPECT_GE(objects, 1);
  // logs -o json: NDJSON too.
  ProcessResult logs = Ctl({"logs", id_a, "-o", "json"});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  std::istringstream log_lines(logs.out);
  int log_objects = 0;
  while (std::getline(log_lines, line)) {
    auto j = json::parse(line);
    EXPECT_EQ(j["rank"], 0);
    EXPECT_TRUE(j["line"].is_string());
    ++log_objects;
  }
  EXPECT_GE(log_objects, 1);

  // submit --wait -o json: one document, the job as it ended.
  const std::string c = JobFile("c.yaml", TrainYaml(Out("c"), 3));
  ProcessResult one_doc = Ctl({"submit", "-f", c, "--wait", "-o", "json"});
  EXPECT_EQ(one_doc.exit_code, 0) << one_doc.err;
  json doc;
  ASSERT_NO_THROW(doc = json::parse(one_doc.out)) << one_doc.out;
  EXPECT_EQ(doc["state"], "SUCCEEDED");

  // delete: the record and attempt folder go, the output dir stays.
  const std::string attempt_dir = daemon_->data_dir() + "/jobs/" + id_a + "/attempt-1";
  ASSERT_TRUE(fs::exists(attempt_dir)) << attempt_dir;
  fs::create_directories(Out("a"));
  std::ofstream(Out("a") + "/keep.txt") << "mine";
  ProcessResult deleted = Ctl({"delete", id_a});
  EXPECT_EQ(deleted.exit_code, 0) << deleted.err;
  EXPECT_TRUE(Contains(deleted.out, "jobs/" + id_a + " deleted")) << deleted.out;
  EXPECT_FALSE(fs::exists(attempt_dir));
  EXPECT_FALSE(fs::exists(daemon_->data_dir() + "/jobs/" + id_a));
  EXPECT_TRUE(fs::exists(Out("a") + "/keep.txt"));
  ProcessResult gone = Ctl({"get", id_a});
  EXPECT_EQ(gone.exit_code, 3);
  EXPECT_TRUE(Contains(gone.err, "NOT_FOUND")) << gone.err;
  EXPECT_EQ(Ctl({"delete", id_a}).exit_code, 3);

  // An active job is not deleted.
  const std::string longer = JobFile("long.yaml", TrainYaml(Out("long"), 100000));
  ProcessResult running = Ctl({"submit", "-f", longer, "-o", "name"});
  ASSERT_EQ(running.exit_code, 0) << running.err;
  const std::string long_name = running.out.substr(0, running.out.find('\n'));
  ProcessResult refused = Ctl({"delete", long_name});
  EXPECT_EQ(refused.exit_code, 3);
  EXPECT_TRUE(Contains(refused.err, "only a finished job can be deleted")) << refused.err;

  // A second job on the same output_dir is refused by name while the first is active.
  const std::string same = JobFile("same.yaml", TrainYaml(Out("long"), 5));
  ProcessResult clash = Ctl({"submit", "-f", same});
  EXPECT_EQ(clash.exit_code, 3);
  EXPECT_TRUE(Contains(clash.err, "output_dir " + Out("long") + " is used by " + long_name)) << clash.err;

  // wait --timeout: exit 1 naming the timeout.
  ProcessResult timeout = Ctl({"wait", long_name, "--for", "state=SUCCEEDED", "--timeout", "1s"});
  EXPECT_EQ(timeout.exit_code, 1);
  EXPECT_TRUE(Contains(timeout.err, "timed out after 1s")) << timeout.err;

  // Cancelled: describe reads "cancelled", and the first event has a blank FROM.
  ASSERT_EQ(Ctl({"cancel", long_name}).exit_code, 0);
  ASSERT_EQ(Ctl({"wait", long_name, "--for", "state=CANCELLED", "--timeout", "60s"}).exit_code, 0);
  ProcessResult described = Ctl({"describe", long_name});
  EXPECT_EQ(described.exit_code, 0) << described.err;
  const size_t error_row = described.out.find("\nError:");
  ASSERT_NE(error_row, std::string::npos) << described.out;
  const std::string error_line = described.out.substr(error_row + 1, described.out.find('\n', error_row + 1) - error_row - 1);
  EXPECT_TRUE(Contains(error_line, " cancelled")) << error_line;
  EXPECT_FALSE(Contains(described.out, "FAILURE_CLASS_UNSPECIFIED")) << described.out;
  EXPECT_FALSE(Contains(described.out, "JOB_STATE_UNSPECIFIED")) << described.out;
  // Now finished, its output dir is free again.
  EXPECT_EQ(Ctl({"submit", "-f", same}).exit_code, 0);
}

TEST_F(CliTest, OutputOnlyFieldsInAFileAreIgnoredWithANote) {
  StartDaemon();
  const std::string path = JobFile("saved.yaml", "name: jobs/abc\nstate: RUNNING\nversion: 7\n" + TrainYaml(Out("saved"), 2));
  ProcessResult r = Ctl({"submit", "-f", path, "-o", "name"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.err, "note: ignoring output-only fields in " + path + ": name, state, version")) << r.err;
  EXPECT_NE(r.out, "jobs/abc\n");
}

TEST_F(CliTest, CudaBackendWithoutAGpuIsRefusedAtCreateForBothKinds) {
  StartDaemon();  // the harness runs fp8d with --gpus none: CPU slots only
  const std::string train = JobFile("cuda-train.yaml", TrainYaml(Out("ct"), 2));
  std::string text;
  {
    std::ifstream in(train);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  text.replace(text.find("backend: cpu"), 12, "backend: cuda");
  std::ofstream(train) << text;
  const std::string calibrate = JobFile("cuda-cal.yaml", "calibrate:\n  input: /nonexistent/m.safetensors\n"
                                                         "  output_dir: " + Out("cc") + "\n  backend: cuda\n");
  ProcessResult t = Ctl({"submit", "-f", train});
  ProcessResult c = Ctl({"submit", "-f", calibrate});
  EXPECT_EQ(t.exit_code, 3) << t.err;
  EXPECT_EQ(c.exit_code, 3) << c.err;
  EXPECT_TRUE(Contains(t.err, "FAILED_PRECONDITION: job.train.backend: cuda, but no node of this fp8d has a GPU")) << t.err;
  EXPECT_TRUE(Contains(c.err, "FAILED_PRECONDITION: job.calibrate.backend: cuda, but no node of this fp8d has a GPU")) << c.err;
  EXPECT_EQ(Ctl({"list", "-o", "name"}).out, "") << "nothing was created";
}

TEST_F(CliTest, JobTtlAfterFinishedDeletesOldFinishedJobs) {
  DaemonOptions options;
  options.extra_args = {"--job-ttl-after-finished", "1s"};
  StartDaemon(options);
  ProcessResult r = Ctl({"submit", "-f", JobFile("t.yaml", TrainYaml(Out("t"), 2)), "--parsable", "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_TRUE(PollUntil([&] { return Ctl({"get", id}).exit_code == 3; }, std::chrono::seconds(30)))
      << "still there after 30 s";
  EXPECT_FALSE(fs::exists(daemon_->data_dir() + "/jobs/" + id));
}

// Garbage request bytes: every method answers INVALID_ARGUMENT with a message, not
// UNIMPLEMENTED with none.
TEST_F(CliTest, GarbageRequestBytesAreInvalidArgumentOnEveryMethod) {
  StartDaemon();
  grpc::GenericStub stub(client().channel());
  const std::string garbage("\xff\xff\xff\xff\x0f\x12\x80", 7);  // a truncated varint and a bad tag
  for (const std::string method : {"CreateJob", "GetJob", "ListJobs", "CancelJob", "DeleteJob",
                                   "WatchJob", "GetJobLogs", "GetServerInfo"}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    std::promise<grpc::Status> finished;
    // A unary call works for the streaming methods too: one request, then the status.
    stub.UnaryCall(&context, "/fp8d.v1.JobService/" + method, grpc::StubOptions(), &request, &response,
                   [&finished](grpc::Status st) { finished.set_value(st); });
    const grpc::Status status = finished.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << status.error_message();
    EXPECT_TRUE(Contains(status.error_message(), "request: not a valid fp8d.v1.")) << method << ": " << status.error_message();
  }
}

// ------------------------------------------------------------- a shared cluster (issue 34 item 4)

using fp8d::v1::Job;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The line of `text` that shows `name` ("" when none does).
std::string LineWith(const std::string& text, const std::string& name) {
  for (const auto& line : Lines(text)) {
    if (Contains(line, name + " ")) return line;
  }
  return "";
}

// Two principals (alice, bob: submitters) with bearer tokens, so jobs have different owners.
class SharedClusterCliTest : public CliTest {
 protected:
  void StartWithTokens(DaemonOptions options = {}) {
    const std::string tokens = tmp_.path() + "/tokens";
    std::ofstream(tokens) << Sha256("tok-alice") << " alice submitter\n" << Sha256("tok-bob") << " bob submitter\n";
    options.extra_args.insert(options.extra_args.end(), {"--auth-tokens", tokens});
    StartDaemon(std::move(options));
  }
  fp8d::client::JobClient As(const std::string& token) {
    fp8d::client::ConnectionOptions options;
    options.address = daemon_->address();
    options.token = token;
    return fp8d::client::JobClient(options);
  }
  ProcessResult CtlAs(const std::string& token, std::vector<std::string> args,
                      std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {Fp8ctlPath(), "--server", daemon_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    env["FP8D_TOKEN"] = token;
    return RunProcess(argv, env);
  }
  static std::string Sha256(const std::string& text) {
    ProcessResult r = RunProcess({"/bin/sh", "-c", "printf %s '" + text + "' | sha256sum"});
    return r.out.substr(0, 64);
  }
};

TEST_F(SharedClusterCliTest, ListShowsOwnerAndReasonWithinEightyColumnsAndFiltersByOwner) {
  DaemonOptions options;
  options.cpu_slots = 1;  // so a second job waits, with a reason
  StartWithTokens(options);
  auto alice = As("tok-alice");
  auto bob = As("tok-bob");
  Job failing = TestTrainJob(Out("fails"), 10);
  (*failing.mutable_env())["FP8_TEST_MODE"] = "exit_code";  // 64: INVALID_SPEC, not retried
  (*failing.mutable_env())["FP8_TEST_CRASH_STEP"] = "1";
  auto f = alice.CreateJob(failing);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto failed = WaitTerminal(alice, f->name());
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  ASSERT_EQ(failed->state(), fp8d::v1::FAILED);
  auto running = alice.CreateJob(TestTrainJob(Out("long"), 100000));
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  ASSERT_TRUE(WaitState(alice, running->name(), fp8d::v1::RUNNING).ok());
  Job waiting_job = TestTrainJob(Out("waits"), 3);
  waiting_job.set_display_name("a display name long enough to be cut at eighty columns");
  auto waiting = bob.CreateJob(waiting_job);
  ASSERT_TRUE(waiting.ok()) << waiting.status().ToString();
  std::string reason;
  ASSERT_TRUE(PollUntil([&] {
    auto j = bob.GetJob(waiting->name());
    reason = j.ok() ? j->pending_reason() : "";
    return !reason.empty();
  })) << "no pending_reason on the waiting job";

  // Wide: every reason whole.
  ProcessResult wide = CtlAs("tok-alice", {"list"}, {{"COLUMNS", "250"}});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  const auto header = Lines(wide.out).at(0);
  EXPECT_TRUE(Contains(header, "OWNER") && Contains(header, "REASON")) << wide.out;
  EXPECT_TRUE(Contains(LineWith(wide.out, waiting->name()), " bob ")) << wide.out;
  EXPECT_TRUE(Contains(LineWith(wide.out, waiting->name()), reason)) << wide.out;
  EXPECT_TRUE(Contains(LineWith(wide.out, f->name()), " alice ")) << wide.out;
  EXPECT_TRUE(Contains(LineWith(wide.out, f->name()), "INVALID_SPEC: ")) << wide.out;
  EXPECT_TRUE(Contains(LineWith(wide.out, running->name()), " RUNNING ")) << wide.out;

  // 80 columns: no line reaches the edge; the reason and the display name are cut with "...".
  ProcessResult narrow = CtlAs("tok-alice", {"list"}, {{"COLUMNS", "80"}});
  ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
  for (const auto& line : Lines(narrow.out)) EXPECT_LT(line.size(), 80u) << narrow.out;
  EXPECT_TRUE(Contains(Lines(narrow.out).at(0), "OWNER") && Contains(Lines(narrow.out).at(0), "REASON")) << narrow.out;
  std::cout << "at 80 columns:\n" << narrow.out;
  EXPECT_TRUE(Contains(LineWith(narrow.out, waiting->name()), "...")) << narrow.out;
  EXPECT_TRUE(Contains(LineWith(narrow.out, waiting->name()), " bob ")) << narrow.out;

  // The same on a real 80-column terminal (fp8ctl reads the width from it).
  const std::string sock = "fp8d-cli-list-" + std::to_string(getpid());
  const std::string script = tmp_.path() + "/list.sh";
  std::ofstream(script) << "FP8D_TOKEN=tok-alice '" << Fp8ctlPath() << "' --server " << daemon_->address()
                        << " list; sleep 30\n";
  const std::string tmux_path = Lines(RunProcess({"/bin/sh", "-c", "command -v tmux"}).out + "\n").at(0);
  ProcessResult tmux = tmux_path.empty()
                           ? ProcessResult{}
                           : RunProcess({tmux_path, "-L", sock, "new-session", "-d", "-x", "80", "-y", "20", "sh " + script},
                                        {{"TERM", "xterm"}});
  if (tmux.exit_code == 0) {
    std::string screen;
    EXPECT_TRUE(PollUntil([&] {
      screen = RunProcess({tmux_path, "-L", sock, "capture-pane", "-p"}).out;
      return Contains(screen, waiting->name());
    }, std::chrono::seconds(20))) << screen;
    RunProcess({tmux_path, "-L", sock, "kill-server"});
    const auto rows = Lines(screen);
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_LT(rows[i].size(), 80u) << screen;
      // A wrapped row would continue on a line that is not a job's or the header.
      if (rows[i].find_first_not_of(' ') != std::string::npos) {
        EXPECT_TRUE(rows[i].rfind("jobs/", 0) == 0 || rows[i].rfind("NAME", 0) == 0) << screen;
      }
    }
    EXPECT_TRUE(Contains(LineWith(screen, waiting->name()), "bob")) << screen;
  } else {
    std::cerr << "tmux could not start (" << tmux.err << "): 80-column terminal check skipped\n";
  }

  // --owner: me is the caller; a name is that owner; nobody's is an empty table.
  ProcessResult mine = CtlAs("tok-alice", {"list", "--owner", "me", "-o", "name"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, running->name() + "\n" + f->name() + "\n");
  ProcessResult bobs = CtlAs("tok-alice", {"list", "--owner", "bob", "-o", "name"});
  ASSERT_EQ(bobs.exit_code, 0) << bobs.err;
  EXPECT_EQ(bobs.out, waiting->name() + "\n");
  ProcessResult bob_me = CtlAs("tok-bob", {"list", "--owner", "me", "-o", "name"});
  EXPECT_EQ(bob_me.out, waiting->name() + "\n");
  ProcessResult nobody = CtlAs("tok-alice", {"list", "--owner", "nobody"});
  ASSERT_EQ(nobody.exit_code, 0) << nobody.err;
  EXPECT_EQ(Lines(nobody.out).size(), 1u) << nobody.out;
  // Paging under the filter: one job per page, the next page still only alice's.
  ProcessResult page = CtlAs("tok-alice", {"list", "--owner", "alice", "--page-size", "1", "-o", "name"});
  EXPECT_EQ(page.out, running->name() + "\n");
  ProcessResult too_long = CtlAs("tok-alice", {"list", "--owner", std::string(300, 'x')});
  EXPECT_EQ(too_long.exit_code, 2);
  EXPECT_TRUE(Contains(too_long.err, "owner")) << too_long.err;

  // Only their owners may cancel them (the harness's client is neither).
  ASSERT_TRUE(alice.CancelJob(running->name()).ok());
  ASSERT_TRUE(WaitTerminal(alice, running->name()).ok());
  ASSERT_TRUE(WaitTerminal(bob, waiting->name()).ok());
}

TEST_F(CliTest, VersionPrintsTheServersToo) {
  DaemonOptions options;
  options.loopback_role = "viewer";  // any role may ask
  StartDaemon(options);
  ProcessResult both = Ctl({"version"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const auto lines = Lines(both.out);
  ASSERT_EQ(lines.size(), 2u) << both.out;
  EXPECT_EQ(lines[0].rfind("fp8ctl ", 0), 0u) << both.out;
  EXPECT_EQ(lines[1].rfind("server: fp8d ", 0), 0u) << both.out;
  EXPECT_TRUE(Contains(lines[1], "commit ") && Contains(lines[1], ", launcher local")) << both.out;
  auto info = client().GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_FALSE(info->commit().empty());
  EXPECT_TRUE(Contains(info->version(), info->commit())) << info->version();
  EXPECT_EQ(info->launcher(), "local");

  ProcessResult unreachable = RunProcess({Fp8ctlPath(), "--server", "127.0.0.1:1", "version"});
  EXPECT_EQ(unreachable.exit_code, 3);
  EXPECT_EQ(unreachable.out.rfind("fp8ctl ", 0), 0u) << unreachable.out;
  EXPECT_TRUE(Contains(unreachable.err, "server: ")) << unreachable.err;
}

TEST_F(CliTest, BulkCancelNeedsYesAndPrintsACount) {
  StartDaemon();
  std::vector<std::string> team;
  for (int i = 0; i < 3; ++i) {
    Job job = TestTrainJob(Out("team-" + std::to_string(i)), 100000);
    (*job.mutable_labels())["team"] = "x";
    auto created = client().CreateJob(job);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    team.push_back(created->name());
  }
  Job other_job = TestTrainJob(Out("other"), 100000);
  (*other_job.mutable_labels())["team"] = "y";
  auto other = client().CreateJob(other_job);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto state_of = [&](const std::string& name) {
    auto j = client().GetJob(name);
    return j.ok() ? j->state() : fp8d::v1::JOB_STATE_UNSPECIFIED;
  };

  // Without --yes: what it would cancel, exit 1, nothing cancelled.
  ProcessResult dry = Ctl({"cancel", "-l", "team=x"});
  EXPECT_EQ(dry.exit_code, 1) << dry.err;
  EXPECT_TRUE(Contains(dry.out, "would cancel 3 jobs:")) << dry.out;
  for (const auto& n : team) EXPECT_TRUE(Contains(dry.out, "  " + n + "\n")) << dry.out;
  EXPECT_FALSE(Contains(dry.out, other->name())) << dry.out;
  EXPECT_TRUE(Contains(dry.err, "pass --yes")) << dry.err;
  ProcessResult dry_names = Ctl({"cancel", team[0], other->name()});
  EXPECT_EQ(dry_names.exit_code, 1);
  EXPECT_TRUE(Contains(dry_names.out, "would cancel 2 jobs:")) << dry_names.out;
  for (const auto& n : team) EXPECT_NE(state_of(n), fp8d::v1::CANCELLING) << n;
  for (const auto& n : team) EXPECT_NE(state_of(n), fp8d::v1::CANCELLED) << n;

  ProcessResult yes = Ctl({"cancel", "-l", "team=x", "--yes"});
  EXPECT_EQ(yes.exit_code, 0) << yes.err;
  EXPECT_TRUE(Contains(yes.out, "cancelled 3 of 3 jobs\n")) << yes.out;
  for (const auto& n : team) {
    auto done = WaitTerminal(client(), n);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->state(), fp8d::v1::CANCELLED);
  }
  EXPECT_NE(state_of(other->name()), fp8d::v1::CANCELLED);
  // The selector now matches only finished jobs: nothing to cancel.
  ProcessResult none = Ctl({"cancel", "-l", "team=x"});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(Contains(none.out, "cancelled 0 of 0 jobs")) << none.out;

  // Several names with --yes (a cancelled one again is fine); one name as before, no count.
  ProcessResult names = Ctl({"cancel", team[0], other->name(), "-y"});
  EXPECT_EQ(names.exit_code, 0) << names.err;
  EXPECT_TRUE(Contains(names.out, "cancelled 2 of 2 jobs")) << names.out;
  ProcessResult one = Ctl({"cancel", other->name()});
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(Lines(one.out).size(), 1u) << one.out;
  EXPECT_TRUE(Contains(one.out, other->name() + " CANCEL")) << one.out;
  ASSERT_TRUE(WaitTerminal(client(), other->name()).ok());

  // Neither names nor a selector, or both: a usage error.
  EXPECT_EQ(Ctl({"cancel"}).exit_code, 2);
  EXPECT_EQ(Ctl({"cancel", team[0], "-l", "team=x"}).exit_code, 2);
  // A name that does not exist among others: reported, the others still cancelled, exit 3.
  ProcessResult missing = Ctl({"cancel", "jobs/does-not-exist", team[1], "--yes"});
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_TRUE(Contains(missing.err, "jobs/does-not-exist: ")) << missing.err;
  EXPECT_TRUE(Contains(missing.out, "cancelled 1 of 2 jobs")) << missing.out;
}

TEST_F(CliTest, LogsTailAcrossRanksWithARankPrefix) {
  StartDaemon();
  Job job = TestTrainJob(Out("two-ranks"), 3);
  job.mutable_resources()->set_ranks(2);
  auto created = client().CreateJob(job);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto done = WaitTerminal(client(), created->name());
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->state(), fp8d::v1::SUCCEEDED) << done->error().message();

  std::vector<std::vector<std::string>> rank_lines(2);
  for (int r = 0; r < 2; ++r) {
    ProcessResult one = Ctl({"logs", created->name(), "--rank", std::to_string(r)});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    rank_lines[r] = Lines(one.out);
    ASSERT_GE(rank_lines[r].size(), 3u) << one.out;
    EXPECT_FALSE(Contains(one.out, "[rank ")) << "one rank asked for: no prefix";
  }

  // Without --rank: every rank, each line prefixed.
  ProcessResult all = Ctl({"logs", created->name()});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::vector<std::string> expected;
  for (int r = 0; r < 2; ++r) {
    for (const auto& l : rank_lines[r]) expected.push_back("[rank " + std::to_string(r) + "] " + l);
  }
  EXPECT_EQ(Lines(all.out), expected);

  // --tail 2: the last two lines of each rank.
  ProcessResult tail = Ctl({"logs", created->name(), "--tail", "2"});
  ASSERT_EQ(tail.exit_code, 0) << tail.err;
  std::vector<std::string> expected_tail;
  for (int r = 0; r < 2; ++r) {
    const auto& l = rank_lines[r];
    for (size_t i = l.size() - 2; i < l.size(); ++i) expected_tail.push_back("[rank " + std::to_string(r) + "] " + l[i]);
  }
  EXPECT_EQ(Lines(tail.out), expected_tail);
  ProcessResult one_tail = Ctl({"logs", created->name(), "--rank", "1", "--tail", "1"});
  EXPECT_EQ(one_tail.out, rank_lines[1].back() + "\n");
  ProcessResult zero = Ctl({"logs", created->name(), "--tail", "0"});
  EXPECT_EQ(zero.exit_code, 0) << zero.err;
  EXPECT_EQ(zero.out, "");
  ProcessResult more = Ctl({"logs", created->name(), "--rank", "0", "--tail", "100000"});
  EXPECT_EQ(Lines(more.out), rank_lines[0]);

  // -o json: one object per line, with its rank.
  ProcessResult json_tail = Ctl({"logs", created->name(), "--tail", "1", "-o", "json"});
  ASSERT_EQ(json_tail.exit_code, 0) << json_tail.err;
  const auto objects = Lines(json_tail.out);
  ASSERT_EQ(objects.size(), 2u) << json_tail.out;
  for (int r = 0; r < 2; ++r) {
    const json o = json::parse(objects[r]);
    EXPECT_EQ(o["rank"], r);
    EXPECT_EQ(o["line"], rank_lines[r].back());
  }
  // --follow --tail on a finished job: the tail, then the stream ends with the job.
  ProcessResult follow = Ctl({"logs", created->name(), "--tail", "1", "-f"});
  EXPECT_EQ(follow.exit_code, 0) << follow.err;
  auto followed = Lines(follow.out);  // the ranks are followed at once: in either order
  std::sort(followed.begin(), followed.end());
  EXPECT_EQ(followed, (std::vector<std::string>{"[rank 0] " + rank_lines[0].back(),
                                                "[rank 1] " + rank_lines[1].back()}));
}

}  // namespace
}  // namespace fp8d::itest
