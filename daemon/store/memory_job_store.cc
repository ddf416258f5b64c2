// SPDX-License-Identifier: Apache-2.0
// NewMemoryJobStore: the JobStore contract with nothing on disk, for deterministic tests of
// the manager and the API. Same ids, page tokens, idempotency and errors as the SQLite store
// (tests/store/job_store_conformance_test.cc runs one suite against both).
#include <map>
#include <mutex>
#include <unordered_map>

#include "daemon/store/job_store.h"
#include "daemon/store/store_util.h"

namespace fp8d::store {
namespace {

using internal::IdFromName;

struct StoredJob {
  int64_t seq = 0;
  fp8d::v1::Job job;
  std::vector<fp8d::v1::JobEvent> events;
  std::map<int32_t, AttemptRecord> attempts;          // by number
  std::map<int64_t, fp8d::v1::Checkpoint> checkpoints;  // by step
};

class MemoryJobStore final : public JobStore {
 public:
  StatusOr<std::vector<CreateResult>> CreateJobs(std::vector<CreateRequest> requests) override {
    std::lock_guard lock(mu_);
    std::vector<CreateResult> results;
    results.reserve(requests.size());
    const int64_t now_ms = internal::NowMs();
    for (CreateRequest& req : requests) {
      CreateResult res;
      if (!req.request_id.empty()) {
        auto it = by_request_id_.find(req.request_id);
        if (it != by_request_id_.end()) {
          const StoredJob& existing = jobs_.at(it->second.seq);
          if (it->second.hash == req.request_hash) {
            res.job = existing.job;
          } else {
            res.status = internal::RequestIdConflict(req.request_id, existing.job.name());
          }
          results.push_back(std::move(res));
          continue;
        }
      }
      const int64_t seq = ++last_seq_;
      const std::string id = ids_.Next(now_ms);
      StoredJob stored;
      stored.seq = seq;
      stored.job = std::move(req.job);
      stored.job.set_name(internal::NameForId(id));
      stored.events.push_back(internal::CreationEvent(stored.job));
      res.job = stored.job;
      res.created = true;
      by_id_[id] = seq;
      if (!req.request_id.empty()) by_request_id_[req.request_id] = {seq, req.request_hash};
      jobs_.emplace(seq, std::move(stored));
      results.push_back(std::move(res));
    }
    return results;
  }

  StatusOr<fp8d::v1::Job> GetJob(const std::string& name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(name));
    return stored->job;
  }

  StatusOr<ListResult> ListJobs(const ListFilter& filter) override {
    std::lock_guard lock(mu_);
    int64_t below = INT64_MAX;
    if (!filter.page_token.empty()) {
      FP8_ASSIGN_OR_RETURN(below, internal::DecodePageToken(filter.page_token, filter));
    }
    const size_t page_size = internal::EffectivePageSize(filter.page_size);
    ListResult out;
    int64_t last_seq = 0;
    for (auto it = jobs_.lower_bound(below); it != jobs_.begin();) {
      --it;
      const fp8d::v1::Job& job = it->second.job;
      if (filter.state != fp8d::v1::JOB_STATE_UNSPECIFIED && job.state() != filter.state) continue;
      if (filter.kind != fp8d::v1::JOB_KIND_UNSPECIFIED && job.kind() != filter.kind) continue;
      if (!internal::MatchesLabelFilter(filter, job)) continue;
      if (out.jobs.size() == page_size) {  // one more exists: there is a next page
        out.next_page_token = internal::EncodePageToken(last_seq, filter);
        break;
      }
      out.jobs.push_back(job);
      last_seq = it->first;
    }
    return out;
  }

  StatusOr<std::vector<fp8d::v1::Job>> ListActiveJobs() override {
    std::lock_guard lock(mu_);
    std::vector<fp8d::v1::Job> out;
    for (const auto& [seq, stored] : jobs_) {
      if (internal::IsActiveState(stored.job.state())) out.push_back(stored.job);
    }
    return out;
  }

  Status UpdateJob(const fp8d::v1::Job& job, const fp8d::v1::JobEvent* event) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job.name()));
    stored->job = job;
    if (event != nullptr) {
      fp8d::v1::JobEvent copy = *event;
      StoreTimeAsSqliteDoes(copy.mutable_time());
      stored->events.push_back(std::move(copy));
    }
    return fp8::OkStatus();
  }

  Status UpdateJobs(const std::vector<fp8d::v1::Job>& jobs) override {
    std::lock_guard lock(mu_);
    // All or nothing, like the SQLite transaction: check every name before writing any.
    std::vector<StoredJob*> targets;
    for (const fp8d::v1::Job& job : jobs) {
      FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job.name()));
      targets.push_back(stored);
    }
    for (size_t i = 0; i < jobs.size(); ++i) targets[i]->job = jobs[i];
    return fp8::OkStatus();
  }

  Status PutAttempt(const std::string& job_name, const AttemptRecord& record) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job_name));
    stored->attempts[record.attempt.number()] = record;
    return fp8::OkStatus();
  }

  Status PutAttempts(const std::vector<std::pair<std::string, AttemptRecord>>& records) override {
    std::lock_guard lock(mu_);
    // All or nothing, like the SQLite transaction: check every name before writing any.
    std::vector<StoredJob*> targets;
    for (const auto& [job_name, record] : records) {
      FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job_name));
      targets.push_back(stored);
    }
    for (size_t i = 0; i < records.size(); ++i) {
      targets[i]->attempts[records[i].second.attempt.number()] = records[i].second;
    }
    return fp8::OkStatus();
  }

  StatusOr<std::vector<AttemptRecord>> ListAttempts(const std::string& job_name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job_name));
    std::vector<AttemptRecord> out;
    for (const auto& [number, record] : stored->attempts) out.push_back(record);
    return out;
  }

  StatusOr<std::vector<fp8d::v1::JobEvent>> ListEvents(const std::string& job_name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job_name));
    return stored->events;
  }

  Status PutCheckpoint(const std::string& job_name, const fp8d::v1::Checkpoint& ckpt) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job_name));
    fp8d::v1::Checkpoint copy = ckpt;
    StoreTimeAsSqliteDoes(copy.mutable_create_time());
    stored->checkpoints[ckpt.step()] = copy;
    return fp8::OkStatus();
  }

  StatusOr<std::vector<int32_t>> DeleteJob(const std::string& name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(name));
    if (internal::IsActiveState(stored->job.state())) {
      return fp8::FailedPreconditionError(name + " is " + fp8d::v1::JobState_Name(stored->job.state()) +
                                          "; only a finished job can be deleted (cancel it first)");
    }
    std::vector<int32_t> attempts;
    for (const auto& [number, record] : stored->attempts) attempts.push_back(number);
    const int64_t seq = stored->seq;
    for (auto it = by_request_id_.begin(); it != by_request_id_.end();) {
      it = it->second.seq == seq ? by_request_id_.erase(it) : std::next(it);
    }
    by_id_.erase(IdFromName(name).value());
    jobs_.erase(seq);
    return attempts;
  }

  StatusOr<std::vector<std::string>> ListFinishedBefore(int64_t before_ms, size_t limit) override {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& [seq, stored] : jobs_) {
      if (out.size() >= limit) break;
      const auto& job = stored.job;
      if (internal::IsActiveState(job.state()) || !job.has_end_time()) continue;
      if (internal::StoredTimeMs(job.end_time()) < before_ms) out.push_back(job.name());
    }
    return out;
  }

  StatusOr<std::vector<AttemptUsage>> ListAttemptUsage(int64_t ended_after_ms) override {
    std::lock_guard lock(mu_);
    std::vector<AttemptUsage> out;
    for (const auto& [seq, stored] : jobs_) {
      for (const auto& [number, record] : stored.attempts) {
        AttemptUsage u;
        if (internal::AttemptUsageOf(stored.job, record.attempt, ended_after_ms, &u)) out.push_back(std::move(u));
      }
    }
    return out;
  }

  StatusOr<std::vector<fp8d::v1::Checkpoint>> ListCheckpoints(const std::string& job_name) override {
    std::lock_guard lock(mu_);
    FP8_ASSIGN_OR_RETURN(StoredJob * stored, Find(job_name));
    std::vector<fp8d::v1::Checkpoint> out;
    for (const auto& [step, ckpt] : stored->checkpoints) out.push_back(ckpt);
    return out;
  }

  Status IntegrityCheck() override {
    std::lock_guard lock(mu_);
    // The invariants the indexes would hold in SQLite.
    for (const auto& [id, seq] : by_id_) {
      auto it = jobs_.find(seq);
      if (it == jobs_.end() || it->second.job.name() != internal::NameForId(id)) {
        return fp8::DataLossError("memory store: id index out of step for " + id);
      }
    }
    if (by_id_.size() != jobs_.size()) return fp8::DataLossError("memory store: id index size");
    return fp8::OkStatus();
  }

  int64_t CountJobs() override {
    std::lock_guard lock(mu_);
    return static_cast<int64_t>(jobs_.size());
  }

 private:
  struct RequestKey {
    int64_t seq;
    std::string hash;
  };

  // Event and checkpoint times are columns in milliseconds in SQLite; an unset time is "now".
  static void StoreTimeAsSqliteDoes(google::protobuf::Timestamp* ts) {
    internal::SetTimestampMs(ts, internal::StoredTimeMs(*ts));
  }

  StatusOr<StoredJob*> Find(const std::string& name) {
    FP8_ASSIGN_OR_RETURN(std::string id, IdFromName(name));
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return fp8::NotFoundError("job " + name + " not found");
    return &jobs_.at(it->second);
  }

  std::mutex mu_;
  internal::IdGenerator ids_;
  int64_t last_seq_ = 0;
  std::map<int64_t, StoredJob> jobs_;  // by creation sequence
  std::unordered_map<std::string, int64_t> by_id_;
  std::unordered_map<std::string, RequestKey> by_request_id_;
};

}  // namespace

std::unique_ptr<JobStore> NewMemoryJobStore() { return std::make_unique<MemoryJobStore>(); }

}  // namespace fp8d::store
