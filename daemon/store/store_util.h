// SPDX-License-Identifier: Apache-2.0
// Pieces both JobStore implementations share, so that they behave the same by construction:
// job ids, names, page tokens, page sizes, the fields the store fills on create, and the
// encoding of a rank's runtime record. Internal to daemon/store.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/store/job_store.h"

namespace fp8d::store::internal {

inline constexpr int kDefaultPageSize = 50;
inline constexpr int kMaxPageSize = 1000;

// Job ids: 12 characters of lowercase Crockford base32, 9 for the creation time in ms since
// the epoch and 3 for a counter within that millisecond. They sort like creation order and
// stay unique and increasing even if the clock steps back (the generator never goes below the
// last id it issued or was seeded with).
class IdGenerator {
 public:
  std::string Next(int64_t now_ms);
  // Continue after `id` (the greatest id already stored); ignored if it is not a valid id.
  void SeedAfter(const std::string& id);

 private:
  int64_t last_ms_ = -1;
  int64_t counter_ = 0;
};

inline constexpr const char* kNamePrefix = "jobs/";
std::string NameForId(const std::string& id);
// "jobs/<id>" → id; INVALID_ARGUMENT naming `name` when it is not of that form.
StatusOr<std::string> IdFromName(const std::string& name);

// The filter's owner (when set) is the job's, and its label requirements hold for the job's labels.
bool MatchesLabelFilter(const ListFilter& filter, const fp8d::v1::Job& job);

// page_size 0 (or negative) → 50; above 1000 → 1000.
int EffectivePageSize(int page_size);

// The opaque page token: the last creation sequence returned plus the filter it was issued
// for. Decoding checks the filter matches, so a token cannot be reused with another filter.
std::string EncodePageToken(int64_t last_seq, const ListFilter& filter);
// Returns the sequence to continue below; INVALID_ARGUMENT naming page_token when the token is
// malformed or was issued for another filter.
StatusOr<int64_t> DecodePageToken(const std::string& token, const ListFilter& filter);

// Not terminal: what ListActiveJobs returns. (The store does not depend on daemon/core; the
// conformance test checks this agrees with core::IsTerminal.)
bool IsActiveState(fp8d::v1::JobState state);
inline constexpr fp8d::v1::JobState kActiveStates[] = {
    fp8d::v1::QUEUED, fp8d::v1::STARTING, fp8d::v1::RUNNING, fp8d::v1::RETRY_WAIT,
    fp8d::v1::CANCELLING};

int64_t NowMs();
void SetTimestampMs(google::protobuf::Timestamp* ts, int64_t ms);
int64_t TimestampMs(const google::protobuf::Timestamp& ts);
// How event and checkpoint times are stored: milliseconds, and an unset (zero) time is now.
int64_t StoredTimeMs(const google::protobuf::Timestamp& ts);

// The event recorded with a new job: its version and create time, UNSPECIFIED → its state.
fp8d::v1::JobEvent CreationEvent(const fp8d::v1::Job& job);

// Rank runtimes as a JSON array of {"rank", "handle", "events_offset"}. Rows written before
// launcher handles existed hold one "rank pid start_time events_offset" line per rank; they
// decode to the local launcher's handle "pid:<pid>:start:<start_time>" (empty for pid 0), which
// is what those numbers were, so an upgraded controller still re-adopts their workers.
std::string EncodeRuntime(const std::vector<RankRuntime>& runtime);
StatusOr<std::vector<RankRuntime>> DecodeRuntime(const std::string& text);

// `attempt` of `job` as accounting sees it; false when it never started or ended before
// `ended_after_ms` (ListAttemptUsage).
bool AttemptUsageOf(const fp8d::v1::Job& job, const fp8d::v1::Attempt& attempt, int64_t ended_after_ms,
                    AttemptUsage* out);

// The per-item error for a request_id reused with another body.
Status RequestIdConflict(const std::string& request_id, const std::string& existing_name);

}  // namespace fp8d::store::internal
