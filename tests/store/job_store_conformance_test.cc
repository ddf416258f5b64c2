// SPDX-License-Identifier: Apache-2.0
// One suite for every JobStore implementation (SQLite in a temp dir, memory): the contract of
// daemon/store/job_store.h. SQLite-only properties (persistence, migrations, crash safety)
// follow at the end.
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "daemon/core/job_lifecycle.h"
#include "daemon/store/job_store.h"
#include "daemon/store/sqlite_job_store.h"

namespace fp8d::store {
namespace {

using fp8d::v1::Job;
using fp8d::v1::JobState;
using google::protobuf::util::MessageDifferencer;

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    const ::fp8::Status _st = (expr);                    \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (0)

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                          \
  auto FP8_STATUS_CONCAT(_so_, __LINE__) = (expr);                              \
  ASSERT_TRUE(FP8_STATUS_CONCAT(_so_, __LINE__).ok())                           \
      << #expr << ": " << FP8_STATUS_CONCAT(_so_, __LINE__).status().ToString(); \
  lhs = std::move(FP8_STATUS_CONCAT(_so_, __LINE__)).value()

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fp8d-store-XXXXXX").string();
    FP8_CHECK(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A job as the manager hands it over (daemon/core/new_job.h): state, kind, version and times
// already set; the store adds only the name.
Job MakeJob(fp8d::v1::JobKind kind = fp8d::v1::TRAIN, int priority = 0,
            const std::string& display_name = "job") {
  Job job;
  job.set_state(fp8d::v1::QUEUED);
  job.set_kind(kind);
  job.set_version(1);
  job.mutable_create_time()->set_seconds(1764600000);
  job.mutable_create_time()->set_nanos(250'000'000);
  *job.mutable_update_time() = job.create_time();
  job.set_display_name(display_name);
  job.set_priority(priority);
  job.mutable_resources()->set_ranks(1);
  if (kind == fp8d::v1::TRAIN) {
    job.mutable_train()->mutable_model()->set_preset("tiny");
    job.mutable_train()->mutable_training()->set_max_steps(100);
    job.mutable_train()->set_output_dir("/tmp/out");
  } else {
    job.mutable_calibrate()->set_input("/tmp/model.safetensors");
    job.mutable_calibrate()->set_output_dir("/tmp/out");
  }
  (*job.mutable_labels())["team"] = "fp8";
  return job;
}

CreateRequest Req(Job job, std::string request_id = "", std::string hash = "") {
  return CreateRequest{std::move(job), std::move(request_id), std::move(hash)};
}

// ------------------------------------------------------------------------------------------
// The parameterized contract.

enum class Impl { kSqlite, kMemory };
void PrintTo(Impl impl, std::ostream* os) { *os << (impl == Impl::kSqlite ? "sqlite" : "memory"); }

class JobStoreConformance : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    if (GetParam() == Impl::kSqlite) {
      auto opened = OpenSqliteJobStore(dir_.File("fp8d.db"));
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      store_ = std::move(opened).value();
    } else {
      store_ = NewMemoryJobStore();
    }
  }

  // Creates one job and returns it (asserting success).
  Job Create(Job job = MakeJob()) {
    auto results = store_->CreateJobs({Req(std::move(job))});
    FP8_CHECK(results.ok());
    FP8_CHECK(results->size() == 1 && (*results)[0].status.ok() && (*results)[0].created);
    return (*results)[0].job;
  }

  std::vector<Job> CreateMany(int n, fp8d::v1::JobKind kind = fp8d::v1::TRAIN) {
    std::vector<Job> out;
    while (static_cast<int>(out.size()) < n) {
      std::vector<CreateRequest> batch;
      for (int i = 0; i < 512 && static_cast<int>(out.size() + batch.size()) < n; ++i) {
        batch.push_back(Req(MakeJob(kind)));
      }
      auto results = store_->CreateJobs(std::move(batch));
      FP8_CHECK(results.ok());
      for (auto& r : *results) out.push_back(r.job);
    }
    return out;
  }

  void SetState(Job* job, JobState state) {
    fp8d::v1::JobEvent ev;
    ev.set_version(job->version() + 1);
    ev.set_from_state(job->state());
    ev.set_to_state(state);
    ev.set_message("test");
    job->set_state(state);
    job->set_version(job->version() + 1);
    FP8_CHECK_OK(store_->UpdateJob(*job, &ev));
  }

  std::vector<std::string> Names(const std::vector<Job>& jobs) {
    std::vector<std::string> out;
    for (const Job& j : jobs) out.push_back(j.name());
    return out;
  }

  // Every page of a listing, following next_page_token.
  std::vector<std::string> ListAll(ListFilter filter, int* pages = nullptr) {
    std::vector<std::string> out;
    int n = 0;
    do {
      auto page = store_->ListJobs(filter);
      FP8_CHECK(page.ok());
      for (const Job& j : page->jobs) out.push_back(j.name());
      filter.page_token = page->next_page_token;
      ++n;
    } while (!filter.page_token.empty());
    if (pages != nullptr) *pages = n;
    return out;
  }

  TempDir dir_;
  std::unique_ptr<JobStore> store_;
};

TEST_P(JobStoreConformance, CreateNamesTheJobAndStoresTheRestAsGiven) {
  Job in = MakeJob(fp8d::v1::CALIBRATE, 7, "calib");
  in.set_name("jobs/client-chosen");  // the store assigns the name
  Job job = Create(in);
  ASSERT_EQ(job.name().rfind("jobs/", 0), 0u) << job.name();
  EXPECT_EQ(job.name().size(), 5u + 12u);
  EXPECT_NE(job.name(), "jobs/client-chosen");
  // Everything else is what it was given: the store fills in no field of its own.
  Job expected = in;
  expected.set_name(job.name());
  EXPECT_TRUE(MessageDifferencer::Equals(job, expected)) << job.DebugString() << expected.DebugString();
  // Not even the ones it could: a job handed over in another state keeps it.
  Job other = MakeJob();
  other.set_state(fp8d::v1::JOB_STATE_UNSPECIFIED);
  other.set_version(3);
  Job stored_other = Create(other);
  EXPECT_EQ(stored_other.state(), fp8d::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(stored_other.version(), 3);

  ASSERT_OK_AND_ASSIGN(Job got, store_->GetJob(job.name()));
  EXPECT_TRUE(MessageDifferencer::Equals(got, job)) << got.DebugString() << job.DebugString();

  ASSERT_OK_AND_ASSIGN(auto events, store_->ListEvents(job.name()));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].version(), 1);
  EXPECT_TRUE(MessageDifferencer::Equals(events[0].time(), in.create_time()));
  EXPECT_EQ(events[0].from_state(), fp8d::v1::JOB_STATE_UNSPECIFIED);
  EXPECT_EQ(events[0].to_state(), fp8d::v1::QUEUED);
  EXPECT_EQ(store_->CountJobs(), 2);
}

TEST_P(JobStoreConformance, IdsAreUniqueAndSortInCreationOrder) {
  std::vector<Job> jobs = CreateMany(1500);
  std::set<std::string> seen;
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE(seen.insert(jobs[i].name()).second);
    if (i > 0) {
      EXPECT_LT(jobs[i - 1].name(), jobs[i].name());
    }
  }
  EXPECT_EQ(store_->CountJobs(), 1500);
}

TEST_P(JobStoreConformance, EmptyBatchIsFine) {
  ASSERT_OK_AND_ASSIGN(auto results, store_->CreateJobs({}));
  EXPECT_TRUE(results.empty());
  EXPECT_EQ(store_->CountJobs(), 0);
}

TEST_P(JobStoreConformance, NotFoundAndBadNames) {
  Create();
  EXPECT_EQ(store_->GetJob("jobs/0000000000zz").status().code(), fp8::StatusCode::kNotFound);
  auto bad = store_->GetJob("projects/x");
  EXPECT_EQ(bad.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("name"), std::string::npos);
  EXPECT_EQ(store_->GetJob("jobs/").status().code(), fp8::StatusCode::kInvalidArgument);
  const std::string missing = "jobs/missing";
  EXPECT_EQ(store_->ListEvents(missing).status().code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListAttempts(missing).status().code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListCheckpoints(missing).status().code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->PutAttempt(missing, AttemptRecord{}).code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->PutCheckpoint(missing, fp8d::v1::Checkpoint{}).code(),
            fp8::StatusCode::kNotFound);
  Job ghost = MakeJob();
  ghost.set_name(missing);
  EXPECT_EQ(store_->UpdateJob(ghost, nullptr).code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->CountJobs(), 1);
}

TEST_P(JobStoreConformance, LabelSelectorFiltersAndPages) {
  std::vector<std::string> nlp;
  for (int i = 0; i < 30; ++i) {
    Job job = MakeJob();
    (*job.mutable_labels())["team"] = i % 3 == 0 ? "nlp" : "vision";
    Job created = Create(std::move(job));
    if (i % 3 == 0) nlp.insert(nlp.begin(), created.name());  // newest first
  }
  ListFilter filter;
  filter.page_size = 4;  // pages must fill across the rows the selector skips
  filter.labels = fp8::ParseLabelSelector("team=nlp").value();
  int pages = 0;
  EXPECT_EQ(ListAll(filter, &pages), nlp);
  EXPECT_EQ(pages, 3);
  filter.labels = fp8::ParseLabelSelector("team!=vision,!missing").value();
  EXPECT_EQ(ListAll(filter), nlp);
  filter.labels = fp8::ParseLabelSelector("missing").value();
  EXPECT_TRUE(ListAll(filter).empty());
}

TEST_P(JobStoreConformance, OwnerFiltersAndPagesAlone) {
  std::vector<std::string> alice;
  for (int i = 0; i < 30; ++i) {
    Job job = MakeJob();
    job.set_owner(i % 3 == 0 ? "alice" : "bob");
    Job created = Create(std::move(job));
    if (i % 3 == 0) alice.insert(alice.begin(), created.name());  // newest first
  }
  ListFilter filter;
  filter.page_size = 4;  // pages must fill across the rows of other owners
  filter.owner = "alice";
  int pages = 0;
  EXPECT_EQ(ListAll(filter, &pages), alice);
  EXPECT_EQ(pages, 3);
  filter.owner = "carol";
  EXPECT_TRUE(ListAll(filter).empty());
}

TEST_P(JobStoreConformance, DeleteRemovesAFinishedJobWithItsRows) {
  Job job = Create(MakeJob());
  EXPECT_EQ(store_->DeleteJob(job.name()).status().code(), fp8::StatusCode::kFailedPrecondition);
  AttemptRecord attempt;
  attempt.attempt.set_number(1);
  FP8_CHECK_OK(store_->PutAttempt(job.name(), attempt));
  attempt.attempt.set_number(2);
  FP8_CHECK_OK(store_->PutAttempt(job.name(), attempt));
  fp8d::v1::Checkpoint ckpt;
  ckpt.set_step(10);
  FP8_CHECK_OK(store_->PutCheckpoint(job.name(), ckpt));
  job.mutable_end_time()->set_seconds(1000);
  SetState(&job, fp8d::v1::SUCCEEDED);
  Job other = Create(MakeJob());

  ASSERT_OK_AND_ASSIGN(auto due, store_->ListFinishedBefore(1001 * 1000, 10));
  EXPECT_EQ(due, std::vector<std::string>{job.name()});
  ASSERT_OK_AND_ASSIGN(auto none, store_->ListFinishedBefore(999 * 1000, 10));
  EXPECT_TRUE(none.empty());

  ASSERT_OK_AND_ASSIGN(auto attempts, store_->DeleteJob(job.name()));
  EXPECT_EQ(attempts, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(store_->GetJob(job.name()).status().code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->ListEvents(job.name()).status().code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteJob(job.name()).status().code(), fp8::StatusCode::kNotFound);
  EXPECT_EQ(store_->CountJobs(), 1);
  EXPECT_TRUE(store_->GetJob(other.name()).ok());
  EXPECT_TRUE(store_->IntegrityCheck().ok());
}

TEST_P(JobStoreConformance, ListIsNewestFirstWithStablePages) {
  std::vector<Job> jobs = CreateMany(23);
  ListFilter filter;
  filter.page_size = 5;
  int pages = 0;
  std::vector<std::string> all = ListAll(filter, &pages);
  std::vector<std::string> expected = Names(jobs);
  std::reverse(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  EXPECT_EQ(pages, 5);  // 5+5+5+5+3, and the last page has no token

  // Exactly one full page: no token (no empty trailing page).
  filter.page_size = 23;
  ASSERT_OK_AND_ASSIGN(ListResult one, store_->ListJobs(filter));
  EXPECT_EQ(one.jobs.size(), 23u);
  EXPECT_TRUE(one.next_page_token.empty());
}

TEST_P(JobStoreConformance, PagesAreStableUnderConcurrentInserts) {
  std::vector<Job> before = CreateMany(10);
  ListFilter filter;
  filter.page_size = 4;
  ASSERT_OK_AND_ASSIGN(ListResult first, store_->ListJobs(filter));
  ASSERT_EQ(first.jobs.size(), 4u);
  CreateMany(7);  // newer jobs arrive while the client pages
  std::vector<std::string> seen = Names(first.jobs);
  filter.page_token = first.next_page_token;
  while (!filter.page_token.empty()) {
    ASSERT_OK_AND_ASSIGN(ListResult page, store_->ListJobs(filter));
    for (const Job& j : page.jobs) seen.push_back(j.name());
    filter.page_token = page.next_page_token;
  }
  std::vector<std::string> expected = Names(before);
  std::reverse(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);  // no duplicates, no skips, none of the new ones
}

TEST_P(JobStoreConformance, PagesAreStableWhileAnotherThreadInserts) {
  std::vector<Job> before = CreateMany(60);
  ListFilter filter;
  filter.page_size = 7;
  ASSERT_OK_AND_ASSIGN(ListResult first, store_->ListJobs(filter));
  std::vector<std::string> seen = Names(first.jobs);
  std::thread writer([this] {
    for (int i = 0; i < 30; ++i) CreateMany(10);
  });
  filter.page_token = first.next_page_token;
  while (!filter.page_token.empty()) {
    auto page = store_->ListJobs(filter);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const Job& j : page->jobs) seen.push_back(j.name());
    filter.page_token = page->next_page_token;
  }
  writer.join();
  std::vector<std::string> expected = Names(before);
  std::reverse(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(store_->CountJobs(), 360);
}

TEST_P(JobStoreConformance, ListFiltersByStateAndKind) {
  std::vector<Job> train = CreateMany(6, fp8d::v1::TRAIN);
  std::vector<Job> calib = CreateMany(5, fp8d::v1::CALIBRATE);
  SetState(&train[1], fp8d::v1::CANCELLED);
  SetState(&train[4], fp8d::v1::CANCELLED);
  SetState(&calib[0], fp8d::v1::CANCELLED);

  ListFilter f;
  f.page_size = 2;
  f.state = fp8d::v1::CANCELLED;
  EXPECT_EQ(ListAll(f), (std::vector<std::string>{calib[0].name(), train[4].name(), train[1].name()}));
  f.state = fp8d::v1::JOB_STATE_UNSPECIFIED;
  f.kind = fp8d::v1::CALIBRATE;
  std::vector<std::string> expect_calib = Names(calib);
  std::reverse(expect_calib.begin(), expect_calib.end());
  EXPECT_EQ(ListAll(f), expect_calib);
  f.state = fp8d::v1::QUEUED;
  f.kind = fp8d::v1::TRAIN;
  EXPECT_EQ(ListAll(f), (std::vector<std::string>{train[5].name(), train[3].name(), train[2].name(),
                                                  train[0].name()}));
  f.state = fp8d::v1::RUNNING;
  f.kind = fp8d::v1::JOB_KIND_UNSPECIFIED;
  ASSERT_OK_AND_ASSIGN(ListResult none, store_->ListJobs(f));
  EXPECT_TRUE(none.jobs.empty());
  EXPECT_TRUE(none.next_page_token.empty());
}

TEST_P(JobStoreConformance, BadPageTokensAreInvalidArgumentNamingPageToken) {
  CreateMany(5);
  ListFilter f;
  f.page_size = 2;
  f.state = fp8d::v1::QUEUED;
  ASSERT_OK_AND_ASSIGN(ListResult first, store_->ListJobs(f));
  ASSERT_FALSE(first.next_page_token.empty());

  for (const std::string& token : {std::string("not a token!"), std::string("djE6"),
                                   first.next_page_token + "AA", std::string("AAAA")}) {
    ListFilter bad = f;
    bad.page_token = token;
    auto res = store_->ListJobs(bad);
    EXPECT_EQ(res.status().code(), fp8::StatusCode::kInvalidArgument) << token;
    EXPECT_NE(res.status().message().find("page_token"), std::string::npos) << res.status().message();
  }
  // A token is bound to the filter it was issued for.
  ListFilter other;
  other.page_size = 2;
  other.kind = fp8d::v1::TRAIN;
  other.page_token = first.next_page_token;
  auto res = store_->ListJobs(other);
  EXPECT_EQ(res.status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(res.status().message().find("page_token"), std::string::npos);
  // ... but the page size may change between pages.
  ListFilter bigger = f;
  bigger.page_size = 100;
  bigger.page_token = first.next_page_token;
  ASSERT_OK_AND_ASSIGN(ListResult rest, store_->ListJobs(bigger));
  EXPECT_EQ(rest.jobs.size(), 3u);
}

TEST_P(JobStoreConformance, PageSizeDefaultsTo50AndClampsAt1000) {
  CreateMany(1100);
  ListFilter f;
  f.page_size = 0;
  ASSERT_OK_AND_ASSIGN(ListResult d, store_->ListJobs(f));
  EXPECT_EQ(d.jobs.size(), 50u);
  f.page_size = -3;
  ASSERT_OK_AND_ASSIGN(ListResult n, store_->ListJobs(f));
  EXPECT_EQ(n.jobs.size(), 50u);
  f.page_size = 5000;
  ASSERT_OK_AND_ASSIGN(ListResult big, store_->ListJobs(f));
  EXPECT_EQ(big.jobs.size(), 1000u);
  EXPECT_FALSE(big.next_page_token.empty());
}

TEST_P(JobStoreConformance, SameRequestIdAndBodyReturnsTheSameJob) {
  ASSERT_OK_AND_ASSIGN(auto first, store_->CreateJobs({Req(MakeJob(), "req-1", "hash-a")}));
  ASSERT_TRUE(first[0].created);
  Job job = first[0].job;
  SetState(&job, fp8d::v1::STARTING);  // the retry sees the job as it is now
  ASSERT_OK_AND_ASSIGN(auto again, store_->CreateJobs({Req(MakeJob(), "req-1", "hash-a")}));
  ASSERT_TRUE(again[0].status.ok()) << again[0].status.ToString();
  EXPECT_FALSE(again[0].created);
  EXPECT_EQ(again[0].job.name(), job.name());
  EXPECT_EQ(again[0].job.state(), fp8d::v1::STARTING);
  EXPECT_EQ(store_->CountJobs(), 1);
}

TEST_P(JobStoreConformance, SameRequestIdOtherBodyIsInvalidArgument) {
  ASSERT_OK_AND_ASSIGN(auto first, store_->CreateJobs({Req(MakeJob(), "req-1", "hash-a")}));
  ASSERT_OK_AND_ASSIGN(auto other, store_->CreateJobs({Req(MakeJob(), "req-1", "hash-b"),
                                                       Req(MakeJob(), "req-2", "hash-a")}));
  EXPECT_EQ(other[0].status.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(other[0].status.message().find("request_id"), std::string::npos);
  EXPECT_FALSE(other[0].created);
  // A failed item does not fail the others.
  EXPECT_TRUE(other[1].status.ok());
  EXPECT_TRUE(other[1].created);
  EXPECT_EQ(store_->CountJobs(), 2);
}

TEST_P(JobStoreConformance, DuplicateRequestIdsWithinOneBatch) {
  ASSERT_OK_AND_ASSIGN(auto res, store_->CreateJobs({
                                     Req(MakeJob(), "dup", "h1"),
                                     Req(MakeJob(), "dup", "h1"),
                                     Req(MakeJob(), "dup", "h2"),
                                     Req(MakeJob()),
                                     Req(MakeJob()),
                                 }));
  ASSERT_EQ(res.size(), 5u);
  EXPECT_TRUE(res[0].created);
  EXPECT_TRUE(res[1].status.ok());
  EXPECT_FALSE(res[1].created);
  EXPECT_EQ(res[1].job.name(), res[0].job.name());
  EXPECT_EQ(res[2].status.code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_TRUE(res[3].created);
  EXPECT_TRUE(res[4].created);  // no request_id: never deduplicated
  EXPECT_NE(res[3].job.name(), res[4].job.name());
  EXPECT_EQ(store_->CountJobs(), 3);
}

TEST_P(JobStoreConformance, UpdateJobWritesRowAndEventTogether) {
  Job job = Create();
  job.mutable_progress()->set_step(42);
  SetState(&job, fp8d::v1::STARTING);
  SetState(&job, fp8d::v1::RUNNING);
  ASSERT_OK_AND_ASSIGN(Job got, store_->GetJob(job.name()));
  EXPECT_TRUE(MessageDifferencer::Equals(got, job));
  ASSERT_OK_AND_ASSIGN(auto events, store_->ListEvents(job.name()));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].from_state(), fp8d::v1::QUEUED);
  EXPECT_EQ(events[1].to_state(), fp8d::v1::STARTING);
  EXPECT_EQ(events[2].to_state(), fp8d::v1::RUNNING);
  EXPECT_EQ(events[2].version(), 3);
  EXPECT_EQ(events[2].message(), "test");

  // A progress update without an event.
  job.mutable_progress()->set_step(43);
  job.set_version(4);
  ASSERT_OK(store_->UpdateJob(job, nullptr));
  ASSERT_OK_AND_ASSIGN(auto events2, store_->ListEvents(job.name()));
  EXPECT_EQ(events2.size(), 3u);
  ASSERT_OK_AND_ASSIGN(Job got2, store_->GetJob(job.name()));
  EXPECT_EQ(got2.progress().step(), 43);
}

TEST_P(JobStoreConformance, EventTimesAreMillisecondsAndDefaultToNow) {
  Job job = Create();
  fp8d::v1::JobEvent timed;
  timed.set_version(2);
  timed.mutable_time()->set_seconds(1700000000);
  timed.mutable_time()->set_nanos(123456789);
  timed.set_from_state(fp8d::v1::QUEUED);
  timed.set_to_state(fp8d::v1::CANCELLED);
  job.set_state(fp8d::v1::CANCELLED);
  job.set_version(2);
  ASSERT_OK(store_->UpdateJob(job, &timed));
  fp8d::v1::JobEvent untimed;  // no time: the store stamps it
  untimed.set_version(3);
  job.set_version(3);
  ASSERT_OK(store_->UpdateJob(job, &untimed));
  ASSERT_OK_AND_ASSIGN(auto events, store_->ListEvents(job.name()));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].time().seconds(), 1700000000);
  EXPECT_EQ(events[1].time().nanos(), 123000000);
  EXPECT_GT(events[2].time().seconds(), 1700000000);
  EXPECT_EQ(events[2].time().nanos() % 1000000, 0);
}

TEST_P(JobStoreConformance, UpdateJobsIsAllOrNothing) {
  std::vector<Job> jobs = CreateMany(3);
  jobs[0].mutable_progress()->set_step(1);
  jobs[2].mutable_progress()->set_step(3);
  Job ghost = MakeJob();
  ghost.set_name("jobs/0000000000zz");
  EXPECT_EQ(store_->UpdateJobs({jobs[0], ghost, jobs[2]}).code(), fp8::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(Job unchanged, store_->GetJob(jobs[0].name()));
  EXPECT_EQ(unchanged.progress().step(), 0);

  ASSERT_OK(store_->UpdateJobs({jobs[0], jobs[2]}));
  ASSERT_OK_AND_ASSIGN(Job a, store_->GetJob(jobs[0].name()));
  ASSERT_OK_AND_ASSIGN(Job c, store_->GetJob(jobs[2].name()));
  EXPECT_EQ(a.progress().step(), 1);
  EXPECT_EQ(c.progress().step(), 3);
  ASSERT_OK(store_->UpdateJobs({}));
}

AttemptRecord MakeAttempt(int number, int ranks) {
  AttemptRecord rec;
  rec.attempt.set_number(number);
  rec.attempt.set_resumed_from(number > 1 ? "/out/checkpoints/step-100" : "");
  for (int r = 0; r < ranks; ++r) {
    auto* p = rec.attempt.add_ranks();
    p->set_rank(r);
    p->set_node("node-a");
    p->set_gpu(r);
    p->set_pid(1000 + r);
    p->set_exit_status(-1);
    // Launcher-owned handles: any text, kept byte for byte (spaces and quotes included).
    rec.runtime.push_back(RankRuntime{r, "launcher:" + std::to_string(1000 + r) + " \"x\"", 4096 * r});
  }
  return rec;
}

TEST_P(JobStoreConformance, AttemptsAreKeptPerNumberWithRuntime) {
  Job job = Create();
  ASSERT_OK(store_->PutAttempt(job.name(), MakeAttempt(2, 2)));
  ASSERT_OK(store_->PutAttempt(job.name(), MakeAttempt(1, 4)));
  AttemptRecord ended = MakeAttempt(1, 4);
  ended.attempt.set_failure_class(fp8d::v1::WORKER_CRASH);
  ended.attempt.set_failure_message("rank 2 killed by signal 9");
  ended.attempt.mutable_ranks(2)->set_exit_status(137);
  ASSERT_OK(store_->PutAttempt(job.name(), ended));  // replaces attempt 1

  ASSERT_OK_AND_ASSIGN(auto attempts, store_->ListAttempts(job.name()));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_TRUE(MessageDifferencer::Equals(attempts[0].attempt, ended.attempt));
  EXPECT_EQ(attempts[1].attempt.number(), 2);
  ASSERT_EQ(attempts[0].runtime.size(), 4u);
  EXPECT_EQ(attempts[0].runtime[3].rank, 3);
  EXPECT_EQ(attempts[0].runtime[3].handle, "launcher:1003 \"x\"");
  EXPECT_EQ(attempts[0].runtime[3].events_offset, 3 * 4096);

  Job other = Create();
  ASSERT_OK_AND_ASSIGN(auto none, store_->ListAttempts(other.name()));
  EXPECT_TRUE(none.empty());
}

TEST_P(JobStoreConformance, PutAttemptsWritesSeveralJobsAllOrNothing) {
  std::vector<Job> jobs = CreateMany(2);
  AttemptRecord moved = MakeAttempt(1, 2);
  moved.runtime[1].events_offset = 777;
  EXPECT_EQ(store_->PutAttempts({{jobs[0].name(), moved}, {"jobs/0000000000zz", MakeAttempt(1, 1)}}).code(),
            fp8::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto none, store_->ListAttempts(jobs[0].name()));
  EXPECT_TRUE(none.empty());

  ASSERT_OK(store_->PutAttempts({{jobs[0].name(), MakeAttempt(1, 2)}, {jobs[1].name(), MakeAttempt(3, 1)}}));
  ASSERT_OK(store_->PutAttempts({{jobs[0].name(), moved}}));  // replaces attempt 1
  ASSERT_OK_AND_ASSIGN(auto a, store_->ListAttempts(jobs[0].name()));
  ASSERT_OK_AND_ASSIGN(auto b, store_->ListAttempts(jobs[1].name()));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(a[0].runtime.size(), 2u);
  EXPECT_EQ(a[0].runtime[1].events_offset, 777);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].attempt.number(), 3);
  ASSERT_OK(store_->PutAttempts({}));
}

TEST_P(JobStoreConformance, CheckpointsAreKeptPerStep) {
  Job job = Create();
  auto ckpt = [](int64_t step, int attempt, const std::string& sum) {
    fp8d::v1::Checkpoint c;
    c.set_step(step);
    c.set_attempt(attempt);
    c.set_path("/out/checkpoints/step-" + std::to_string(step));
    c.set_checksum(sum);
    c.mutable_create_time()->set_seconds(1700000000 + step);
    return c;
  };
  ASSERT_OK(store_->PutCheckpoint(job.name(), ckpt(200, 1, "aa")));
  ASSERT_OK(store_->PutCheckpoint(job.name(), ckpt(100, 1, "bb")));
  ASSERT_OK(store_->PutCheckpoint(job.name(), ckpt(200, 2, "cc")));  // rewritten after a retry
  ASSERT_OK_AND_ASSIGN(auto list, store_->ListCheckpoints(job.name()));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_TRUE(MessageDifferencer::Equals(list[0], ckpt(100, 1, "bb"))) << list[0].DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(list[1], ckpt(200, 2, "cc"))) << list[1].DebugString();
}

TEST_P(JobStoreConformance, ListActiveJobsIsEveryNonTerminalJobOldestFirst) {
  const JobState states[] = {fp8d::v1::QUEUED,    fp8d::v1::STARTING,   fp8d::v1::RUNNING,
                             fp8d::v1::SUCCEEDED, fp8d::v1::FAILED,     fp8d::v1::RETRY_WAIT,
                             fp8d::v1::CANCELLING, fp8d::v1::CANCELLED};
  std::vector<std::string> expected;
  for (JobState s : states) {
    Job job = Create();
    if (s != fp8d::v1::QUEUED) SetState(&job, s);
    // The store's notion of "active" must agree with the lifecycle's terminal states.
    if (!core::IsTerminal(s)) expected.push_back(job.name());
  }
  ASSERT_OK_AND_ASSIGN(auto active, store_->ListActiveJobs());
  EXPECT_EQ(Names(active), expected);
  EXPECT_EQ(active.size(), 5u);
}

TEST_P(JobStoreConformance, ScanActiveJobsHandsOutListActiveJobsInChunks) {
  for (int i = 0; i < 7; ++i) {
    Job job = Create();
    if (i % 3 == 1) SetState(&job, fp8d::v1::SUCCEEDED);  // terminal: left out
    if (i % 3 == 2) SetState(&job, fp8d::v1::RUNNING);
  }
  ASSERT_OK_AND_ASSIGN(auto active, store_->ListActiveJobs());
  ASSERT_EQ(active.size(), 5u);
  std::vector<size_t> sizes;
  std::vector<Job> scanned;
  ASSERT_OK(store_->ScanActiveJobs(2, [&](std::vector<Job> chunk) {
    sizes.push_back(chunk.size());
    for (Job& job : chunk) scanned.push_back(std::move(job));
    return fp8::OkStatus();
  }));
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 1}));
  ASSERT_EQ(scanned.size(), active.size());
  for (size_t i = 0; i < active.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(scanned[i], active[i])) << scanned[i].DebugString();
  }
  // A sink error stops the scan and comes back.
  int calls = 0;
  fp8::Status st = store_->ScanActiveJobs(2, [&](std::vector<Job>) {
    ++calls;
    return fp8::UnavailableError("sink full");
  });
  EXPECT_EQ(st.code(), fp8::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 1);
}

// Accounting reads every attempt that started, with its job's owner and queue, and leaves out
// the ones that ended before the window.
TEST_P(JobStoreConformance, ListAttemptUsageHasEveryStartedAttemptWithItsOwnerAndQueue) {
  Job a = MakeJob();
  a.set_owner("alice");
  a.set_queue("team-a");
  const std::string name = Create(a).name();
  Job b = MakeJob();
  b.set_owner("bob");
  const std::string name_b = Create(b).name();
  auto timed = [](int number, int gpus, int cpus, int64_t start_s, int64_t end_s) {
    AttemptRecord rec;
    rec.attempt.set_number(number);
    for (int r = 0; r < gpus + cpus; ++r) {
      auto* p = rec.attempt.add_ranks();
      p->set_rank(r);
      p->set_gpu(r < gpus ? r : -1);
    }
    if (start_s > 0) rec.attempt.mutable_start_time()->set_seconds(start_s);
    if (end_s > 0) rec.attempt.mutable_end_time()->set_seconds(end_s);
    return rec;
  };
  ASSERT_OK(store_->PutAttempt(name, timed(1, 2, 0, 1000, 1100)));  // ended early
  ASSERT_OK(store_->PutAttempt(name, timed(2, 2, 1, 2000, 2600)));
  ASSERT_OK(store_->PutAttempt(name, timed(3, 1, 0, 3000, 0)));     // still running
  ASSERT_OK(store_->PutAttempt(name_b, timed(1, 0, 4, 0, 0)));  // never started
  ASSERT_OK(store_->PutAttempt(name_b, timed(2, 0, 4, 2500, 2700)));

  ASSERT_OK_AND_ASSIGN(auto all, store_->ListAttemptUsage(0));
  ASSERT_EQ(all.size(), 4u);
  ASSERT_OK_AND_ASSIGN(auto recent, store_->ListAttemptUsage(1'500'000));
  ASSERT_EQ(recent.size(), 3u);
  std::sort(recent.begin(), recent.end(), [](const AttemptUsage& x, const AttemptUsage& y) { return x.start_ms < y.start_ms; });
  EXPECT_EQ(recent[0].owner, "alice");
  EXPECT_EQ(recent[0].queue, "team-a");
  EXPECT_EQ(recent[0].start_ms, 2'000'000);
  EXPECT_EQ(recent[0].end_ms, 2'600'000);
  EXPECT_EQ(recent[0].gpu_ranks, 2);
  EXPECT_EQ(recent[0].cpu_ranks, 1);
  EXPECT_EQ(recent[1].owner, "bob");
  EXPECT_EQ(recent[1].queue, "");
  EXPECT_EQ(recent[1].cpu_ranks, 4);
  EXPECT_EQ(recent[2].start_ms, 3'000'000);
  EXPECT_EQ(recent[2].end_ms, 0) << "running: no end yet";
  EXPECT_EQ(recent[2].gpu_ranks, 1);
}

TEST_P(JobStoreConformance, IntegrityCheckPassesOnAHealthyStore) {
  CreateMany(50);
  ASSERT_OK(store_->IntegrityCheck());
}

INSTANTIATE_TEST_SUITE_P(AllStores, JobStoreConformance,
                         ::testing::Values(Impl::kSqlite, Impl::kMemory),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return info.param == Impl::kSqlite ? "Sqlite" : "Memory";
                         });

// ------------------------------------------------------------------------------------------
// SQLite only.

// Direct SQL on the file, for what the JobStore interface cannot see.
class RawDb {
 public:
  explicit RawDb(const std::string& path) { FP8_CHECK(sqlite3_open(path.c_str(), &db_) == SQLITE_OK); }
  ~RawDb() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    ASSERT_EQ(rc, SQLITE_OK) << sql << ": " << (err ? err : "");
  }
  std::string Text(const std::string& sql) {  // all rows, all columns, joined by '|'
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sql;
    std::string out;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
        const unsigned char* t = sqlite3_column_text(stmt, c);
        out += (out.empty() ? "" : "|") + std::string(t ? reinterpret_cast<const char*>(t) : "");
      }
    }
    sqlite3_finalize(stmt);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

class SqliteJobStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobStore> Open(const SqliteStoreOptions& options = {}) {
    auto opened = OpenSqliteJobStore(path_, options);
    FP8_CHECK(opened.ok());
    return std::move(opened).value();
  }
  TempDir dir_;
  std::string path_ = dir_.File("fp8d.db");
};

TEST_F(SqliteJobStoreTest, EverythingSurvivesAReopen) {
  std::string name;
  Job job;
  {
    auto store = Open();
    ASSERT_OK_AND_ASSIGN(auto res, store->CreateJobs({Req(MakeJob(), "r1", "h1")}));
    job = res[0].job;
    name = job.name();
    fp8d::v1::JobEvent ev;
    ev.set_version(2);
    ev.set_from_state(fp8d::v1::QUEUED);
    ev.set_to_state(fp8d::v1::STARTING);
    job.set_state(fp8d::v1::STARTING);
    job.set_version(2);
    ASSERT_OK(store->UpdateJob(job, &ev));
    ASSERT_OK(store->PutAttempt(name, MakeAttempt(1, 2)));
    fp8d::v1::Checkpoint c;
    c.set_step(10);
    c.set_path("/p");
    ASSERT_OK(store->PutCheckpoint(name, c));
  }
  auto store = Open();
  EXPECT_EQ(store->CountJobs(), 1);
  ASSERT_OK_AND_ASSIGN(Job got, store->GetJob(name));
  EXPECT_TRUE(MessageDifferencer::Equals(got, job));
  ASSERT_OK_AND_ASSIGN(auto events, store->ListEvents(name));
  EXPECT_EQ(events.size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto attempts, store->ListAttempts(name));
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_EQ(attempts[0].runtime.size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto ckpts, store->ListCheckpoints(name));
  EXPECT_EQ(ckpts.size(), 1u);
  // Idempotency survives the restart, and new ids continue after the stored ones.
  ASSERT_OK_AND_ASSIGN(auto again, store->CreateJobs({Req(MakeJob(), "r1", "h1"), Req(MakeJob())}));
  EXPECT_FALSE(again[0].created);
  EXPECT_EQ(again[0].job.name(), name);
  EXPECT_GT(again[1].job.name(), name);
  ASSERT_OK(store->IntegrityCheck());
}

TEST_F(SqliteJobStoreTest, UsesWalAndTheLatestSchema) {
  Open();
  RawDb raw(path_);
  EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Text("PRAGMA user_version"), std::to_string(SqliteSchemaVersion()));
  EXPECT_EQ(raw.Text("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"),
            "attempts|checkpoints|events|jobs");
}

TEST_F(SqliteJobStoreTest, MigratesAnEmptyVersionZeroFile) {
  {
    RawDb raw(path_);
    EXPECT_EQ(raw.Text("PRAGMA user_version"), "0");
  }
  auto store = Open();
  Job job = MakeJob();
  ASSERT_OK_AND_ASSIGN(auto res, store->CreateJobs({Req(job)}));
  EXPECT_TRUE(res[0].created);
  RawDb raw(path_);
  EXPECT_EQ(raw.Text("PRAGMA user_version"), std::to_string(SqliteSchemaVersion()));
}

TEST_F(SqliteJobStoreTest, MigratesStepByStepFromAnOlderVersion) {
  ASSERT_GE(SqliteSchemaVersion(), 2);
  {
    auto store = Open();
    ASSERT_OK_AND_ASSIGN(auto res, store->CreateJobs({Req(MakeJob())}));
  }
  {  // Roll the file back to version 1: the tables without the list indexes.
    RawDb raw(path_);
    raw.Exec("DROP INDEX jobs_by_state; DROP INDEX jobs_by_kind; DROP INDEX jobs_by_state_kind;"
             " PRAGMA user_version = 1;");
  }
  auto store = Open();
  EXPECT_EQ(store->CountJobs(), 1);
  RawDb raw(path_);
  EXPECT_EQ(raw.Text("PRAGMA user_version"), std::to_string(SqliteSchemaVersion()));
  EXPECT_EQ(raw.Text("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'jobs_by_%'"
                     " ORDER BY name"),
            "jobs_by_kind|jobs_by_state|jobs_by_state_kind");
}

TEST_F(SqliteJobStoreTest, RuntimeIsJsonAndRowsFromBeforeHandlesReadAsLocalHandles) {
  std::string name;
  {
    auto store = Open();
    ASSERT_OK_AND_ASSIGN(auto res, store->CreateJobs({Req(MakeJob())}));
    name = res[0].job.name();
    ASSERT_OK(store->PutAttempt(name, MakeAttempt(1, 2)));
    ASSERT_OK(store->PutAttempt(name, MakeAttempt(2, 3)));
  }
  {
    RawDb raw(path_);
    EXPECT_EQ(raw.Text("SELECT substr(runtime, 1, 1) FROM attempts ORDER BY number"), "[|[");
    // What an fp8d before launcher handles wrote: "rank pid start_time events_offset" lines
    // (pid 0: the daemon died before saving that rank's pid).
    raw.Exec("UPDATE attempts SET runtime = '0 4242 987654321 512' || char(10) || "
             "'1 0 0 0' || char(10) WHERE number = 1");
  }
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto attempts, store->ListAttempts(name));
  ASSERT_EQ(attempts.size(), 2u);
  ASSERT_EQ(attempts[0].runtime.size(), 2u);
  EXPECT_EQ(attempts[0].runtime[0].rank, 0);
  EXPECT_EQ(attempts[0].runtime[0].handle, "pid:4242:start:987654321");
  EXPECT_EQ(attempts[0].runtime[0].events_offset, 512);
  EXPECT_EQ(attempts[0].runtime[1].rank, 1);
  EXPECT_EQ(attempts[0].runtime[1].handle, "") << "no pid saved: no handle";
  ASSERT_EQ(attempts[1].runtime.size(), 3u);
  EXPECT_EQ(attempts[1].runtime[2].handle, "launcher:1002 \"x\"");
  {
    RawDb raw(path_);
    raw.Exec("UPDATE attempts SET runtime = '[{\"rank\": 0}]' WHERE number = 2");
  }
  auto bad = store->ListAttempts(name);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), fp8::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("attempts.runtime"), std::string::npos) << bad.status().message();
}

TEST_F(SqliteJobStoreTest, RefusesAFileFromANewerFp8d) {
  {
    RawDb raw(path_);
    raw.Exec("PRAGMA user_version = 999");
  }
  auto opened = OpenSqliteJobStore(path_);
  EXPECT_EQ(opened.status().code(), fp8::StatusCode::kFailedPrecondition);
  EXPECT_NE(opened.status().message().find("999"), std::string::npos);
}

TEST_F(SqliteJobStoreTest, AFileThatIsNotADatabaseIsAnError) {
  std::ofstream(path_) << std::string(8192, 'x');
  auto opened = OpenSqliteJobStore(path_);
  EXPECT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), fp8::StatusCode::kDataLoss) << opened.status().ToString();
}

TEST_F(SqliteJobStoreTest, StartUpQueriesUseTheStateIndex) {
  Open();
  RawDb raw(path_);
  const std::string plan =
      raw.Text("EXPLAIN QUERY PLAN SELECT seq, job FROM jobs WHERE state IN (1, 2, 3, 6, 7) ORDER BY seq");
  EXPECT_NE(plan.find("jobs_by_state"), std::string::npos) << plan;
  const std::string list = raw.Text(
      "EXPLAIN QUERY PLAN SELECT seq, job FROM jobs WHERE seq < 10 AND state = 5 ORDER BY seq DESC LIMIT 51");
  EXPECT_NE(list.find("jobs_by_state"), std::string::npos) << list;
  EXPECT_EQ(list.find("TEMP B-TREE"), std::string::npos) << list;  // no sort step
}

TEST_F(SqliteJobStoreTest, AnotherWriterMakesWritesUnavailableButReadsGoOn) {
  SqliteStoreOptions opts;
  opts.busy_timeout_ms = 50;
  auto store = Open(opts);
  ASSERT_OK_AND_ASSIGN(auto res, store->CreateJobs({Req(MakeJob())}));
  const std::string name = res[0].job.name();
  {
    RawDb other(path_);
    other.Exec("BEGIN IMMEDIATE");  // another process holds the write lock
    auto blocked = store->CreateJobs({Req(MakeJob())});
    EXPECT_EQ(blocked.status().code(), fp8::StatusCode::kUnavailable) << blocked.status().ToString();
    // WAL: readers are not blocked by a writer.
    ASSERT_OK_AND_ASSIGN(Job got, store->GetJob(name));
    EXPECT_EQ(got.name(), name);
    other.Exec("ROLLBACK");
  }
  ASSERT_OK_AND_ASSIGN(auto after, store->CreateJobs({Req(MakeJob())}));
  EXPECT_TRUE(after[0].created);
  EXPECT_EQ(store->CountJobs(), 2);
}

// Runs `child` in a forked process that is expected to die by SIGKILL; returns once it has.
void RunChildThatDies(const std::function<void()>& child) {
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    child();
    _exit(3);  // should not get here: the child kills itself mid-transaction
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST_F(SqliteJobStoreTest, KilledMidCreateLeavesNoPartialJob) {
  RunChildThatDies([this] {
    int commits = 0;
    SqliteStoreOptions opts;
    // The first batch commits; the second dies after writing 300 rows, before COMMIT.
    opts.before_commit_for_testing = [&commits] {
      if (++commits == 2) raise(SIGKILL);
    };
    auto opened = OpenSqliteJobStore(path_, opts);
    if (!opened.ok()) _exit(4);
    std::vector<CreateRequest> a, b;
    for (int i = 0; i < 20; ++i) a.push_back(Req(MakeJob(), "a" + std::to_string(i), "h"));
    for (int i = 0; i < 300; ++i) b.push_back(Req(MakeJob(), "b" + std::to_string(i), "h"));
    if (!(*opened)->CreateJobs(std::move(a)).ok()) _exit(5);
    (void)(*opened)->CreateJobs(std::move(b));
  });
  auto store = Open();
  ASSERT_OK(store->IntegrityCheck());
  EXPECT_EQ(store->CountJobs(), 20);
  ASSERT_OK_AND_ASSIGN(auto active, store->ListActiveJobs());
  EXPECT_EQ(active.size(), 20u);
  RawDb raw(path_);
  EXPECT_EQ(raw.Text("SELECT count(*) FROM events"), "20");
  EXPECT_EQ(raw.Text("SELECT count(*) FROM jobs WHERE request_id LIKE 'b%'"), "0");
  // The lost batch can be retried with the same request ids.
  ASSERT_OK_AND_ASSIGN(auto retry, store->CreateJobs({Req(MakeJob(), "b0", "h")}));
  EXPECT_TRUE(retry[0].created);
}

TEST_F(SqliteJobStoreTest, KilledMidUpdateKeepsTheOldStateAndNoEvent) {
  std::string name;
  {
    auto store = Open();
    ASSERT_OK_AND_ASSIGN(auto res, store->CreateJobs({Req(MakeJob())}));
    name = res[0].job.name();
  }
  RunChildThatDies([this, name] {
    SqliteStoreOptions opts;
    opts.before_commit_for_testing = [] { raise(SIGKILL); };
    auto opened = OpenSqliteJobStore(path_, opts);
    if (!opened.ok()) _exit(4);
    auto job = (*opened)->GetJob(name);
    if (!job.ok()) _exit(5);
    job->set_state(fp8d::v1::STARTING);
    job->set_version(2);
    fp8d::v1::JobEvent ev;
    ev.set_version(2);
    ev.set_from_state(fp8d::v1::QUEUED);
    ev.set_to_state(fp8d::v1::STARTING);
    (void)(*opened)->UpdateJob(*job, &ev);
  });
  auto store = Open();
  ASSERT_OK(store->IntegrityCheck());
  ASSERT_OK_AND_ASSIGN(Job job, store->GetJob(name));
  EXPECT_EQ(job.state(), fp8d::v1::QUEUED);
  EXPECT_EQ(job.version(), 1);
  ASSERT_OK_AND_ASSIGN(auto events, store->ListEvents(name));
  EXPECT_EQ(events.size(), 1u);
}

// The server's fp8d_store_commit_seconds: one observation per committed write transaction (a
// batch of creates is one), none for reads, none once the observer is cleared.
std::atomic<int> g_commits{0};
std::atomic<bool> g_non_negative{true};
void CountCommit(double seconds) {
  g_commits.fetch_add(1);
  if (!(seconds >= 0)) g_non_negative = false;
}

TEST(SqliteCommitObserver, SeesEachWriteTransaction) {
  TempDir dir;
  auto store = OpenSqliteJobStore(dir.File("fp8d.db"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  SetCommitObserver(&CountCommit);
  const int before = g_commits.load();
  auto created = (*store)->CreateJobs({Req(MakeJob()), Req(MakeJob()), Req(MakeJob())});
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(g_commits.load(), before + 1);
  Job job = (*created)[0].job;
  job.set_version(job.version() + 1);
  ASSERT_TRUE((*store)->UpdateJob(job, nullptr).ok());
  EXPECT_EQ(g_commits.load(), before + 2);
  ASSERT_TRUE((*store)->GetJob(job.name()).ok());
  EXPECT_EQ(g_commits.load(), before + 2);
  EXPECT_TRUE(g_non_negative.load());
  SetCommitObserver(nullptr);
  job.set_version(job.version() + 1);
  ASSERT_TRUE((*store)->UpdateJob(job, nullptr).ok());
  EXPECT_EQ(g_commits.load(), before + 2);
}

}  // namespace
}  // namespace fp8d::store
