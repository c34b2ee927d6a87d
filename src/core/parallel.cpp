// Per-thread teams of helper threads for intra-op parallelism.
#include "lockstep/core/parallel.h"

#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep {

namespace {

// A team of helper threads owned by one calling thread. run() hands task i to helper i-1 and
// runs task 0 itself.
class Team {
 public:
  explicit Team(int helpers) {
    for (int i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~Team() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int helpers() const { return static_cast<int>(threads_.size()); }

  void run(int n, const std::function<void(int)>& f) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &f;
      tasks_ = n - 1;
      pending_ = n - 1;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    std::exception_ptr mine;
    try {
      f(0);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    fn_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index >= tasks_) continue;
        fn = fn_;
      }
      std::exception_ptr err;
      try {
        (*fn)(index + 1);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  int tasks_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

std::atomic<bool> g_main_claimed{false};

struct ThreadState {
  int num_threads = 0;  // 0: not yet decided
  std::unique_ptr<Team> team;
};

ThreadState& state() {
  thread_local ThreadState s;
  if (s.num_threads == 0) {
    bool expected = false;
    s.num_threads = g_main_claimed.compare_exchange_strong(expected, true) ? usable_cores() : 1;
  }
  return s;
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

int get_num_threads() { return state().num_threads; }

void set_num_threads(int n) {
  if (n < 1) throw ValueError("set_num_threads: expected at least 1 thread, got " + std::to_string(n));
  // The helper team is kept: a larger team serves a smaller count (parallel_run uses n - 1 of its
  // threads) and parallel_run grows it when needed, so toggling the count (DataParallel's
  // one-device step on the calling thread) starts and joins no threads.
  state().num_threads = n;
}

void parallel_run(int n, const std::function<void(int)>& f) {
  if (n <= 1) {
    if (n == 1) f(0);
    return;
  }
  auto& s = state();
  if (n > s.num_threads)
    throw ValueError("parallel_run: " + std::to_string(n) + " tasks exceed the " +
                     std::to_string(s.num_threads) + " threads of this thread");
  if (!s.team || s.team->helpers() < s.num_threads - 1)
    s.team = std::make_unique<Team>(s.num_threads - 1);
  s.team->run(n, f);
}

}  // namespace lockstep
