// SPDX-License-Identifier: Apache-2.0
// Persistent thread pool behind ParallelFor. The caller thread works too, so NumThreads()
// threads compute in total. Nested or concurrent ParallelFor calls run inline instead of
// waiting on the pool, which rules out deadlock when kernels call kernels.
#include "kernels/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace fp8::kernels {
namespace {

thread_local bool t_inside_parallel_region = false;

int ThreadsFromEnvironment() {
  if (const char* env = std::getenv("FP8_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1 && v <= 1024) return static_cast<int>(v);
  }
  // The cores this process may run on (taskset, a cgroup's cpuset, Slurm's binding), not the
  // machine's: more threads than those only take turns. fp8-worker sets FP8_NUM_THREADS to a
  // rank's share of them (worker/common/launch_env.h).
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads) : num_threads_(num_threads) {
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int num_threads() const { return num_threads_; }

  // Runs task(i) for i in [0, num_tasks), spread over the pool plus the caller. Returns false
  // (having run nothing) if another caller holds the pool, so that caller can run inline.
  bool TryRun(int num_tasks, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      num_tasks_ = num_tasks;
      next_task_.store(0);
      pending_workers_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    RunTasks();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_workers_ == 0; });
    task_ = nullptr;
    return true;
  }

 private:
  void RunTasks() {
    const bool was_inside = t_inside_parallel_region;
    t_inside_parallel_region = true;
    for (int i = next_task_.fetch_add(1); i < num_tasks_; i = next_task_.fetch_add(1)) (*task_)(i);
    t_inside_parallel_region = was_inside;
  }

  void WorkerLoop() {
    uint64_t seen_generation = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
        if (stopping_) return;
        seen_generation = generation_;
      }
      RunTasks();
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_workers_ == 0) done_.notify_one();
    }
  }

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one ParallelFor at a time owns the pool
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stopping_ = false;
  uint64_t generation_ = 0;
  int pending_workers_ = 0;
  const std::function<void(int)>* task_ = nullptr;
  int num_tasks_ = 0;
  std::atomic<int> next_task_{0};
};

ThreadPool& Pool() {
  // Leaked on purpose: worker threads must not be joined during static destruction, when
  // other statics they might touch are already gone.
  static ThreadPool* pool = new ThreadPool(ThreadsFromEnvironment());
  return *pool;
}

}  // namespace

int NumThreads() { return Pool().num_threads(); }

void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_chunks = (n + min_chunk - 1) / min_chunk;
  const int num_chunks = static_cast<int>(std::min<int64_t>(NumThreads(), max_chunks));
  if (num_chunks <= 1 || t_inside_parallel_region) {
    fn(0, n);
    return;
  }
  // Contiguous, nearly equal chunks; the split depends only on n and the thread count.
  const std::function<void(int)> task = [&](int i) {
    const int64_t begin = n * i / num_chunks;
    const int64_t end = n * (i + 1) / num_chunks;
    if (begin < end) fn(begin, end);
  };
  if (!Pool().TryRun(num_chunks, task)) fn(0, n);
}

}  // namespace fp8::kernels
