// SPDX-License-Identifier: Apache-2.0
// CreateBatcher alone: the store thread is a queue the test runs by hand, so which creates
// share a transaction is decided by the test, not by timing.
#include "daemon/core/create_batcher.h"

#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace fp8d::core::testing {
namespace {

using fp8d::v1::Job;

// The store thread, run by the test: each task's store half, then its io half.
struct ManualStoreThread {
  std::deque<std::pair<std::function<void(store::JobStore&)>, std::function<void()>>> tasks;
  void RunOne(store::JobStore& store) {
    ASSERT_FALSE(tasks.empty());
    auto task = std::move(tasks.front());
    tasks.pop_front();
    task.first(store);
    task.second();
  }
};

// A memory store whose create transaction can be made slow or refused (a full disk).
class ControlledStore final : public store::JobStore {
 public:
  bool refuse_creates = false;
  std::chrono::milliseconds create_delay{0};

  fp8::StatusOr<std::vector<store::CreateResult>> CreateJobs(std::vector<store::CreateRequest> r) override {
    std::this_thread::sleep_for(create_delay);
    if (refuse_creates) return fp8::ResourceExhaustedError("database or disk is full (test)");
    return inner_->CreateJobs(std::move(r));
  }
  fp8::StatusOr<Job> GetJob(const std::string& name) override { return inner_->GetJob(name); }
  fp8::StatusOr<store::ListResult> ListJobs(const store::ListFilter& f) override { return inner_->ListJobs(f); }
  fp8::StatusOr<std::vector<Job>> ListActiveJobs() override { return inner_->ListActiveJobs(); }
  fp8::Status UpdateJob(const Job& job, const fp8d::v1::JobEvent* e) override { return inner_->UpdateJob(job, e); }
  fp8::Status UpdateJobs(const std::vector<Job>& jobs) override { return inner_->UpdateJobs(jobs); }
  fp8::Status PutAttempt(const std::string& n, const store::AttemptRecord& r) override {
    return inner_->PutAttempt(n, r);
  }
  fp8::StatusOr<std::vector<store::AttemptRecord>> ListAttempts(const std::string& n) override {
    return inner_->ListAttempts(n);
  }
  fp8::StatusOr<std::vector<fp8d::v1::JobEvent>> ListEvents(const std::string& n) override {
    return inner_->ListEvents(n);
  }
  fp8::Status PutCheckpoint(const std::string& n, const fp8d::v1::Checkpoint& c) override {
    return inner_->PutCheckpoint(n, c);
  }
  fp8::StatusOr<std::vector<fp8d::v1::Checkpoint>> ListCheckpoints(const std::string& n) override {
    return inner_->ListCheckpoints(n);
  }
  fp8::StatusOr<std::vector<int32_t>> DeleteJob(const std::string& n) override { return inner_->DeleteJob(n); }
  fp8::StatusOr<std::vector<std::string>> ListFinishedBefore(int64_t before, size_t limit) override {
    return inner_->ListFinishedBefore(before, limit);
  }
  fp8::StatusOr<std::vector<store::AttemptUsage>> ListAttemptUsage(int64_t ended_after_ms) override {
    return inner_->ListAttemptUsage(ended_after_ms);
  }
  fp8::Status IntegrityCheck() override { return inner_->IntegrityCheck(); }
  int64_t CountJobs() override { return inner_->CountJobs(); }

 private:
  std::unique_ptr<store::JobStore> inner_ = store::NewMemoryJobStore();
};

class CreateBatcherTest : public ::testing::Test {
 protected:
  void Make(int64_t batch_max, int64_t wait_max_us = 0) {
    CreateBatcher::Hooks hooks;
    hooks.run_on_store = [this](auto on_store, auto on_io) {
      thread_.tasks.emplace_back(std::move(on_store), std::move(on_io));
    };
    hooks.created = [this](const Job& job) { created_.push_back(job.name()); };
    hooks.current = [this](const std::string& name) -> std::optional<Job> {
      auto it = cached_.find(name);
      if (it == cached_.end()) return std::nullopt;
      return it->second;
    };
    hooks.batch_created = [this] { ++batches_created_; };
    batcher_ = std::make_unique<CreateBatcher>(io_, batch_max, wait_max_us, hooks);
  }

  // Queues a create; its answer lands in answers_[index].
  size_t Add(const std::string& request_id = "", const std::string& body = "") {
    store::CreateRequest request;
    request.job.set_state(fp8d::v1::QUEUED);
    request.job.set_version(1);
    request.job.mutable_resources()->set_ranks(1);
    request.request_id = request_id;
    request.request_hash = body;
    const size_t index = answers_.size();
    answers_.emplace_back(std::nullopt);
    batcher_->Add(std::move(request), [this, index](fp8::StatusOr<Job> job) {
      ASSERT_FALSE(answers_[index].has_value()) << "answered twice";
      answers_[index] = std::move(job);
    });
    return index;
  }

  boost::asio::io_context io_;
  ManualStoreThread thread_;
  std::unique_ptr<ControlledStore> store_ = std::make_unique<ControlledStore>();
  std::unique_ptr<CreateBatcher> batcher_;
  std::vector<std::optional<fp8::StatusOr<Job>>> answers_;
  std::vector<std::string> created_;
  std::map<std::string, Job> cached_;
  int batches_created_ = 0;
};

TEST_F(CreateBatcherTest, CreatesArrivingDuringAWriteShareTheNextTransaction) {
  Make(/*batch_max=*/3);
  Add();
  ASSERT_EQ(thread_.tasks.size(), 1u) << "a lone create goes out at once";
  for (int i = 0; i < 4; ++i) Add();
  EXPECT_EQ(thread_.tasks.size(), 1u) << "a second write started while one was in flight";
  EXPECT_TRUE(created_.empty());
  EXPECT_FALSE(answers_[0].has_value()) << "answered before the write committed";

  thread_.RunOne(*store_);
  ASSERT_TRUE(answers_[0].has_value() && answers_[0]->ok());
  EXPECT_EQ(created_, std::vector<std::string>{(*answers_[0])->name()});
  ASSERT_EQ(thread_.tasks.size(), 1u) << "the queued creates go out when the write returns";
  for (size_t i = 1; i < answers_.size(); ++i) EXPECT_FALSE(answers_[i].has_value());

  thread_.RunOne(*store_);  // three of the four: batch_max
  EXPECT_EQ(created_.size(), 4u);
  EXPECT_FALSE(answers_[4].has_value());
  thread_.RunOne(*store_);
  EXPECT_TRUE(thread_.tasks.empty());
  EXPECT_EQ(batches_created_, 3);
  std::set<std::string> names;
  for (size_t i = 0; i < answers_.size(); ++i) {
    ASSERT_TRUE(answers_[i].has_value() && answers_[i]->ok()) << i;
    names.insert((*answers_[i])->name());
    EXPECT_EQ(created_[i], (*answers_[i])->name()) << "created out of order";
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_EQ(store_->CountJobs(), 5);
}

TEST_F(CreateBatcherTest, ARepeatedRequestIdWithTheSameBodyAnswersTheExistingJob) {
  Make(/*batch_max=*/10);
  Add("req-1", "body-a");
  Add("req-1", "body-a");  // queued behind the first write
  Add("req-1", "body-a");  // and in the same batch as the one before
  thread_.RunOne(*store_);
  ASSERT_TRUE(answers_[0].has_value() && answers_[0]->ok());
  const std::string name = (*answers_[0])->name();
  // The manager's copy is newer than the stored row (progress not yet written): it answers.
  Job newer = **answers_[0];
  newer.set_version(7);
  cached_[name] = newer;
  thread_.RunOne(*store_);
  for (size_t i = 1; i < 3; ++i) {
    ASSERT_TRUE(answers_[i].has_value() && answers_[i]->ok()) << i;
    EXPECT_EQ((*answers_[i])->name(), name);
    EXPECT_EQ((*answers_[i])->version(), 7);
  }
  EXPECT_EQ(created_, std::vector<std::string>{name}) << "a duplicate was published as new";
  EXPECT_EQ(batches_created_, 1) << "a batch of duplicates asked for a scheduling round";
  EXPECT_EQ(store_->CountJobs(), 1);

  cached_.clear();  // evicted meanwhile: the stored job answers
  Add("req-1", "body-a");
  thread_.RunOne(*store_);
  ASSERT_TRUE(answers_[3].has_value() && answers_[3]->ok());
  EXPECT_EQ((*answers_[3])->name(), name);
  EXPECT_EQ((*answers_[3])->version(), (*answers_[0])->version());
}

TEST_F(CreateBatcherTest, ARepeatedRequestIdWithAnotherBodyIsRefused) {
  Make(/*batch_max=*/10);
  Add("req-1", "body-a");
  thread_.RunOne(*store_);
  Add("req-1", "body-b");
  Add("req-2", "body-b");  // its own request: unaffected
  thread_.RunOne(*store_);
  thread_.RunOne(*store_);
  ASSERT_TRUE(answers_[1].has_value() && answers_[2].has_value());
  ASSERT_FALSE(answers_[1]->ok());
  EXPECT_EQ(answers_[1]->status().code(), fp8::StatusCode::kInvalidArgument);
  EXPECT_NE(answers_[1]->status().message().find("req-1"), std::string::npos)
      << answers_[1]->status().ToString();
  ASSERT_TRUE(answers_[2]->ok());
  EXPECT_EQ(created_.size(), 2u);
}

TEST_F(CreateBatcherTest, AFailedCommitAnswersEveryWaiterWithItsErrorAndPublishesNothing) {
  Make(/*batch_max=*/10);
  store_->refuse_creates = true;
  Add();
  Add("req-1", "body-a");
  Add();
  thread_.RunOne(*store_);  // the lone first create
  thread_.RunOne(*store_);  // the other two, batched
  ASSERT_TRUE(thread_.tasks.empty());
  for (const auto& answer : answers_) {
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->status().code(), fp8::StatusCode::kResourceExhausted);
  }
  EXPECT_TRUE(created_.empty());
  EXPECT_EQ(batches_created_, 0);

  // The store recovers: the next create is written and published normally.
  store_->refuse_creates = false;
  Add("req-1", "body-a");
  thread_.RunOne(*store_);
  ASSERT_TRUE(answers_[3].has_value() && answers_[3]->ok());
  EXPECT_EQ(created_.size(), 1u);
}

TEST_F(CreateBatcherTest, AfterABigBatchALoneCreateWaitsBrieflyForTheOtherCallers) {
  Make(/*batch_max=*/10, /*wait_max_us=*/1000000);
  store_->create_delay = std::chrono::milliseconds(40);
  Add();
  for (int i = 0; i < 3; ++i) Add();
  thread_.RunOne(*store_);
  thread_.RunOne(*store_);  // the three that queued: the last batch had 3 callers
  ASSERT_TRUE(thread_.tasks.empty());

  Add();  // fewer waiting than last time: held back (at most half the 40 ms write)
  EXPECT_TRUE(thread_.tasks.empty()) << "a partial batch went out at once";
  Add();
  Add();  // as many as last time: out at once, without the wait
  ASSERT_EQ(thread_.tasks.size(), 1u);
  thread_.RunOne(*store_);
  EXPECT_EQ(created_.size(), 7u);

  Add();
  EXPECT_TRUE(thread_.tasks.empty());
  const auto start = std::chrono::steady_clock::now();
  while (thread_.tasks.empty() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    io_.run_one_for(std::chrono::milliseconds(100));
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(thread_.tasks.size(), 1u) << "the held-back create was never written";
  EXPECT_GE(waited, std::chrono::milliseconds(15));
  EXPECT_LT(waited, std::chrono::seconds(1)) << "waited for wait_max, not half the last write";
  thread_.RunOne(*store_);
  EXPECT_EQ(created_.size(), 8u);
}

TEST_F(CreateBatcherTest, ShutdownAnswersQueuedCreatesAndLetsTheWriteInFlightFinish) {
  Make(/*batch_max=*/10);
  Add();
  Add();
  batcher_->FailQueued(fp8::UnavailableError("shutting down"));
  EXPECT_FALSE(answers_[0].has_value()) << "the create being written was answered early";
  ASSERT_TRUE(answers_[1].has_value());
  EXPECT_EQ(answers_[1]->status().code(), fp8::StatusCode::kUnavailable);
  thread_.RunOne(*store_);
  ASSERT_TRUE(answers_[0].has_value() && answers_[0]->ok());
  EXPECT_TRUE(thread_.tasks.empty());
  EXPECT_EQ(store_->CountJobs(), 1);
}

}  // namespace
}  // namespace fp8d::core::testing
