// The threads backend's rendezvous (internal; thread_group.cpp): the state the members of one
// group share, a generation barrier that an abort releases with DistError, and one slot per member
// where it publishes the buffer of the collective it is in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/dist/process_group.h"

namespace lockstep::dist::threads_detail {

class Shared {
 public:
  explicit Shared(int n) : size(n), slots(static_cast<std::size_t>(n)) {}

  // Generation barrier: spins briefly (collectives in a training step follow each other closely),
  // then sleeps on a condition variable. Throws DistError once the group is aborted.
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    throw_if_aborted();
    std::uint64_t gen = generation_;
    if (++waiting_ == size) {
      waiting_ = 0;
      generation_ = gen + 1;
      gen_atomic_.store(gen + 1, std::memory_order_release);
      cv_.notify_all();
      return;
    }
    lock.unlock();
    for (int i = 0; i < 2000; ++i) {
      if (gen_atomic_.load(std::memory_order_acquire) != gen) return;
      if (aborted_.load(std::memory_order_acquire)) break;
      if (i > 100) std::this_thread::yield();
    }
    lock.lock();
    cv_.wait(lock, [&] { return generation_ != gen || aborted_.load(); });
    if (generation_ == gen) throw_if_aborted();
  }

  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load()) return;  // the first failure is the one reported
    reason_ = reason;
    aborted_.store(true, std::memory_order_release);
    cv_.notify_all();
  }
  // No member is inside a collective (the caller's promise): the barrier starts afresh.
  void clear_abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.store(false, std::memory_order_release);
    reason_.clear();
    waiting_ = 0;
    ++generation_;
    gen_atomic_.store(generation_, std::memory_order_release);
  }

  const int size;
  struct Slot {
    void* data = nullptr;
    std::int64_t numel = 0;
    DType dtype = DType::Float32;
    const std::vector<Tensor>* list = nullptr;
  };
  std::vector<Slot> slots;
  // Writes member `rank`'s slot, or throws DistError when the group is aborted: a member released
  // from an aborted collective goes on to its next started one at once (its communication
  // thread), and must not overwrite its slot while a slower member still reads it.
  void set_slot(int rank, const Slot& slot) {
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_aborted();
    slots[static_cast<std::size_t>(rank)] = slot;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  std::uint64_t generation_ = 0;
  std::atomic<std::uint64_t> gen_atomic_{0};
  std::atomic<bool> aborted_{false};
  std::string reason_;

  void throw_if_aborted() const {
    if (aborted_.load(std::memory_order_acquire))
      throw DistError("threads process group aborted: " + reason_);
  }
};

}  // namespace lockstep::dist::threads_detail
