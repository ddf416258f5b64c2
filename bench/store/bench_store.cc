// SPDX-License-Identifier: Apache-2.0
// bench_store: durable CreateJobs throughput of the SQLite JobStore at several batch sizes
// (group commit), and the start-up path with many stored jobs (open + ListActiveJobs).
//
//   bench_store [--dir DIR] [--jobs-per-size N] [--startup-jobs N] [--active N]
//
// DIR must be on the disk the daemon would use (not tmpfs), or the fsync cost is not measured.
// Prints one line per measurement.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "daemon/store/job_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using fp8d::store::CreateRequest;
using fp8d::store::JobStore;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// A job the size of a real TrainSpec submission (~300 bytes serialized).
fp8d::v1::Job SampleJob(int i) {
  // As the manager hands a job over (daemon/core/new_job.h): the store adds only the name.
  fp8d::v1::Job job;
  job.set_state(fp8d::v1::QUEUED);
  job.set_kind(fp8d::v1::TRAIN);
  job.set_version(1);
  job.mutable_create_time()->set_seconds(1764600000 + i);
  *job.mutable_update_time() = job.create_time();
  job.set_display_name("bench-" + std::to_string(i));
  job.set_priority(i % 3);
  job.mutable_resources()->set_ranks(1 + i % 4);
  auto* t = job.mutable_train();
  t->mutable_model()->set_preset("gpt2-124m");
  t->mutable_data()->set_train("/data/fineweb/train_*.bin");
  t->mutable_data()->set_val("/data/fineweb/val_*.bin");
  t->mutable_precision()->set_recipe("fp8-tensorwise");
  t->mutable_precision()->set_amax_history_len(16);
  auto* a = t->mutable_training();
  a->set_max_steps(5000);
  a->set_per_device_train_batch_size(16);
  a->set_learning_rate(6e-4);
  a->set_lr_scheduler_type("cosine");
  a->set_warmup_steps(700);
  a->set_weight_decay(0.1);
  a->set_seed(1337 + i);
  a->set_save_steps(500);
  t->set_output_dir("/checkpoints/run-" + std::to_string(i));
  t->set_backend("auto");
  job.mutable_retry()->set_max_attempts(3);
  (*job.mutable_labels())["team"] = "pretraining";
  (*job.mutable_labels())["experiment"] = "fp8-vs-bf16";
  return job;
}

// A UUID-like string derived from n (deterministic, but spread over the key space).
std::string RandomLookingId(uint64_t n) {
  uint64_t a = (n + 1) * 0x9E3779B97F4A7C15ull, b = a ^ (a >> 29) ^ (n * 0xBF58476D1CE4E5B9ull);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx-%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::unique_ptr<JobStore> OpenOrDie(const std::string& path) {
  auto store = fp8d::store::OpenSqliteJobStore(path);
  if (!store.ok()) {
    std::fprintf(stderr, "open %s: %s\n", path.c_str(), store.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(store).value();
}

// Creates `total` jobs in batches of `batch`; returns the elapsed seconds.
double CreateJobs(JobStore* store, int64_t total, int batch, int64_t* counter) {
  const auto start = Clock::now();
  for (int64_t done = 0; done < total;) {
    std::vector<CreateRequest> requests;
    for (int i = 0; i < batch && done < total; ++i, ++done) {
      const int64_t n = (*counter)++;
      // Clients send random ids (fp8ctl: a UUID), so the request_id index sees random keys.
      requests.push_back(CreateRequest{SampleJob(static_cast<int>(n)), RandomLookingId(n),
                                       "sha256-of-body-" + std::to_string(n)});
    }
    auto results = store->CreateJobs(std::move(requests));
    if (!results.ok()) {
      std::fprintf(stderr, "CreateJobs: %s\n", results.status().ToString().c_str());
      std::exit(1);
    }
  }
  return Seconds(start);
}

void RemoveDb(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::filesystem::current_path().string();
  int64_t jobs_per_size = 20000;
  int64_t startup_jobs = 100000;
  int64_t active = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--jobs-per-size")) jobs_per_size = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--startup-jobs")) startup_jobs = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--active")) active = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  const std::string path = dir + "/bench-store-" + std::to_string(getpid()) + ".db";
  std::printf("sqlite file: %s (WAL, synchronous=FULL)\n", path.c_str());

  // 1. Durable create throughput per batch size (each batch = one transaction = one fsync).
  int64_t counter = 0;
  for (int batch : {1, 64, 512}) {
    RemoveDb(path);
    auto store = OpenOrDie(path);
    // Batch size 1 is fsync-bound; fewer jobs keep the run short.
    const int64_t total = batch == 1 ? std::min<int64_t>(jobs_per_size, 2000) : jobs_per_size;
    const double s = CreateJobs(store.get(), total, batch, &counter);
    std::printf("CreateJobs batch=%-4d jobs=%-6lld %8.3f s  %9.0f jobs/s  %7.0f commits/s\n", batch,
                static_cast<long long>(total), s, total / s, (total / static_cast<double>(batch)) / s);
  }

  // 2. Start-up with many jobs stored, most of them finished.
  RemoveDb(path);
  {
    auto store = OpenOrDie(path);
    const auto start = Clock::now();
    CreateJobs(store.get(), startup_jobs, 512, &counter);
    // Finish all but `active` of them, as a long-lived controller would have.
    fp8d::store::ListFilter filter;
    filter.page_size = 512;
    int64_t seen = 0;
    do {
      auto page = store->ListJobs(filter);
      if (!page.ok()) return 1;
      std::vector<fp8d::v1::Job> finished;
      for (auto& job : page->jobs) {
        if (seen++ < active) continue;  // the newest stay queued
        job.set_state(fp8d::v1::SUCCEEDED);
        job.set_version(job.version() + 1);
        finished.push_back(std::move(job));
      }
      if (!store->UpdateJobs(finished).ok()) return 1;
      filter.page_token = page->next_page_token;
    } while (!filter.page_token.empty());
    std::printf("filled %lld jobs (%lld active) in %.1f s\n", static_cast<long long>(startup_jobs),
                static_cast<long long>(active), Seconds(start));
  }
  for (int run = 0; run < 3; ++run) {
    const auto t0 = Clock::now();
    auto store = OpenOrDie(path);
    const double open_s = Seconds(t0);
    const auto t1 = Clock::now();
    auto jobs = store->ListActiveJobs();
    const double list_s = Seconds(t1);
    if (!jobs.ok()) return 1;
    const auto t2 = Clock::now();
    const int64_t count = store->CountJobs();
    const double count_s = Seconds(t2);
    const auto t3 = Clock::now();
    auto page = store->ListJobs(fp8d::store::ListFilter{});
    const double page_s = Seconds(t3);
    std::printf("startup run %d: open %.1f ms + ListActiveJobs %.1f ms (%zu jobs) = %.1f ms;"
                " CountJobs %.1f ms (%lld); first ListJobs page %.1f ms\n",
                run, open_s * 1e3, list_s * 1e3, jobs->size(), (open_s + list_s) * 1e3,
                count_s * 1e3, static_cast<long long>(count), page_s * 1e3);
  }
  {
    auto store = OpenOrDie(path);
    const auto t = Clock::now();
    fp8::Status st = store->IntegrityCheck();
    std::printf("IntegrityCheck with %lld jobs: %s in %.0f ms\n", static_cast<long long>(startup_jobs),
                st.ok() ? "OK" : st.ToString().c_str(), Seconds(t) * 1e3);
  }
  std::printf("file size: %.1f MiB\n", std::filesystem::file_size(path) / 1048576.0);
  RemoveDb(path);
  return 0;
}
