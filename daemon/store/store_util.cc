// SPDX-License-Identifier: Apache-2.0
#include "daemon/store/store_util.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>


namespace fp8d::store::internal {
namespace {

constexpr char kBase32[] = "0123456789abcdefghjkmnpqrstvwxyz";  // Crockford, lowercase
constexpr int kTimeChars = 9;     // 45 bits of milliseconds: until the year 3084
constexpr int kCounterChars = 3;  // 15 bits: 32768 ids per millisecond
constexpr int64_t kCounterLimit = int64_t{1} << (5 * kCounterChars);

void AppendBase32(std::string* out, int64_t value, int chars) {
  for (int i = chars - 1; i >= 0; --i) out->push_back(kBase32[(value >> (5 * i)) & 31]);
}

bool ParseBase32(const std::string& s, size_t pos, int chars, int64_t* value) {
  int64_t v = 0;
  for (int i = 0; i < chars; ++i) {
    const char* p = std::char_traits<char>::find(kBase32, 32, s[pos + i]);
    if (p == nullptr) return false;
    v = (v << 5) | (p - kBase32);
  }
  *value = v;
  return true;
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string Base64UrlEncode(const std::string& in) {
  std::string out;
  uint32_t buf = 0;
  int bits = 0;
  for (unsigned char c : in) {
    buf = (buf << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kB64[(buf >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kB64[(buf << (6 - bits)) & 63]);
  return out;
}

bool Base64UrlDecode(const std::string& in, std::string* out) {
  uint32_t buf = 0;
  int bits = 0;
  for (char c : in) {
    const char* p = std::char_traits<char>::find(kB64, 64, c);
    if (p == nullptr) return false;
    buf = (buf << 6) | static_cast<uint32_t>(p - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((buf >> bits) & 0xff));
    }
  }
  return true;
}

}  // namespace

std::string IdGenerator::Next(int64_t now_ms) {
  if (now_ms > last_ms_) {
    last_ms_ = now_ms;
    counter_ = 0;
  } else if (++counter_ >= kCounterLimit) {
    ++last_ms_;  // borrow from the next millisecond rather than repeat an id
    counter_ = 0;
  }
  std::string id;
  id.reserve(kTimeChars + kCounterChars);
  AppendBase32(&id, last_ms_, kTimeChars);
  AppendBase32(&id, counter_, kCounterChars);
  return id;
}

void IdGenerator::SeedAfter(const std::string& id) {
  int64_t ms = 0, counter = 0;
  if (id.size() != kTimeChars + kCounterChars || !ParseBase32(id, 0, kTimeChars, &ms) ||
      !ParseBase32(id, kTimeChars, kCounterChars, &counter)) {
    return;
  }
  if (ms > last_ms_ || (ms == last_ms_ && counter > counter_)) {
    last_ms_ = ms;
    counter_ = counter;
  }
}

std::string NameForId(const std::string& id) { return kNamePrefix + id; }

StatusOr<std::string> IdFromName(const std::string& name) {
  const std::string prefix = kNamePrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.find('/', prefix.size()) != std::string::npos) {
    return fp8::InvalidArgumentError("name: \"" + name + "\" is not of the form jobs/<id>");
  }
  return name.substr(prefix.size());
}

bool MatchesLabelFilter(const ListFilter& filter, const fp8d::v1::Job& job) {
  if (!filter.owner.empty() && job.owner() != filter.owner) return false;
  if (filter.labels.empty()) return true;
  const std::map<std::string, std::string> labels(job.labels().begin(), job.labels().end());
  return fp8::MatchesLabels(filter.labels, labels);
}

int EffectivePageSize(int page_size) {
  if (page_size <= 0) return kDefaultPageSize;
  return page_size > kMaxPageSize ? kMaxPageSize : page_size;
}

std::string EncodePageToken(int64_t last_seq, const ListFilter& filter) {
  return Base64UrlEncode("v1:" + std::to_string(last_seq) + ":" +
                         std::to_string(static_cast<int>(filter.state)) + ":" +
                         std::to_string(static_cast<int>(filter.kind)));
}

StatusOr<int64_t> DecodePageToken(const std::string& token, const ListFilter& filter) {
  std::string raw;
  long long seq = 0;
  int state = 0, kind = 0, consumed = 0;
  if (!Base64UrlDecode(token, &raw) ||
      std::sscanf(raw.c_str(), "v1:%lld:%d:%d%n", &seq, &state, &kind, &consumed) != 3 ||
      consumed != static_cast<int>(raw.size()) || seq <= 0) {
    return fp8::InvalidArgumentError("page_token: malformed; pass next_page_token unchanged");
  }
  if (state != static_cast<int>(filter.state) || kind != static_cast<int>(filter.kind)) {
    return fp8::InvalidArgumentError(
        "page_token: issued for another filter (state/kind); a token must be reused with the "
        "filter of the request that returned it");
  }
  return static_cast<int64_t>(seq);
}

bool IsActiveState(fp8d::v1::JobState state) {
  for (auto s : kActiveStates) {
    if (s == state) return true;
  }
  return false;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SetTimestampMs(google::protobuf::Timestamp* ts, int64_t ms) {
  ts->set_seconds(ms / 1000);
  ts->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
}

int64_t TimestampMs(const google::protobuf::Timestamp& ts) {
  return ts.seconds() * 1000 + ts.nanos() / 1000000;
}

int64_t StoredTimeMs(const google::protobuf::Timestamp& ts) {
  return ts.seconds() == 0 && ts.nanos() == 0 ? NowMs() : TimestampMs(ts);
}

bool AttemptUsageOf(const fp8d::v1::Job& job, const fp8d::v1::Attempt& attempt, int64_t ended_after_ms,
                    AttemptUsage* out) {
  if (!attempt.has_start_time()) return false;
  const int64_t end = attempt.has_end_time() ? TimestampMs(attempt.end_time()) : 0;
  if (end != 0 && end < ended_after_ms) return false;
  out->owner = job.owner();
  out->queue = job.queue();
  out->start_ms = TimestampMs(attempt.start_time());
  out->end_ms = end;
  out->gpu_ranks = 0;
  out->cpu_ranks = 0;
  for (const auto& r : attempt.ranks()) ++(r.gpu() >= 0 ? out->gpu_ranks : out->cpu_ranks);
  return true;
}

fp8d::v1::JobEvent CreationEvent(const fp8d::v1::Job& job) {
  fp8d::v1::JobEvent ev;
  ev.set_version(job.version());
  *ev.mutable_time() = job.create_time();
  ev.set_from_state(fp8d::v1::JOB_STATE_UNSPECIFIED);
  ev.set_to_state(job.state());
  ev.set_message("created");
  return ev;
}

std::string EncodeRuntime(const std::vector<RankRuntime>& runtime) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankRuntime& r : runtime) {
    out.push_back({{"rank", r.rank}, {"handle", r.handle}, {"events_offset", r.events_offset}});
  }
  return out.dump();
}

namespace {

StatusOr<std::vector<RankRuntime>> DecodeJsonRuntime(const std::string& text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) return fp8::DataLossError("attempts.runtime: not a JSON array");
  std::vector<RankRuntime> out;
  for (const nlohmann::json& item : doc) {
    if (!item.is_object() || !item.contains("rank") || !item["rank"].is_number_integer() ||
        !item.contains("handle") || !item["handle"].is_string() ||
        !item.contains("events_offset") || !item["events_offset"].is_number_integer()) {
      return fp8::DataLossError("attempts.runtime: malformed rank " + item.dump());
    }
    RankRuntime r;
    r.rank = item["rank"].get<int32_t>();
    r.handle = item["handle"].get<std::string>();
    r.events_offset = item["events_offset"].get<int64_t>();
    out.push_back(std::move(r));
  }
  return out;
}

// The format before launcher handles: "rank pid start_time events_offset" lines.
StatusOr<std::vector<RankRuntime>> DecodeLegacyRuntime(const std::string& text) {
  std::vector<RankRuntime> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    RankRuntime r;
    long long pid = 0, offset = 0;
    unsigned long long start = 0;
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%d %lld %llu %lld%n", &r.rank, &pid, &start, &offset,
                    &consumed) != 4 ||
        consumed != static_cast<int>(line.size())) {
      return fp8::DataLossError("attempts.runtime: malformed line \"" + line + "\"");
    }
    if (pid > 0) r.handle = "pid:" + std::to_string(pid) + ":start:" + std::to_string(start);
    r.events_offset = offset;
    out.push_back(r);
  }
  return out;
}

}  // namespace

StatusOr<std::vector<RankRuntime>> DecodeRuntime(const std::string& text) {
  if (!text.empty() && text.front() == '[') return DecodeJsonRuntime(text);
  return DecodeLegacyRuntime(text);
}

Status RequestIdConflict(const std::string& request_id, const std::string& existing_name) {
  return fp8::InvalidArgumentError("request_id: \"" + request_id + "\" was already used for " +
                                   existing_name + " with a different request body");
}

}  // namespace fp8d::store::internal
