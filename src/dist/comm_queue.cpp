// The communication thread of a group member (comm_queue.h): a FIFO of started collectives, each
// a Job that is also the Work handed to the caller.
#include "dist/comm_queue.h"

#include <atomic>
#include <utility>

namespace lockstep::dist::detail {

class CommQueue::Job final : public Work {
 public:
  explicit Job(std::function<void()> task) : task_(std::move(task)) {}

  void wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_.load(std::memory_order_relaxed); });
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() override { return done_.load(std::memory_order_acquire); }

  // On the communication thread: runs the task, records its error, frees what it held, wakes the
  // waiters.
  void run() {
    std::exception_ptr error;
    try {
      task_();
    } catch (...) {
      error = std::current_exception();
    }
    task_ = nullptr;  // the tensors it held go now, not when the last Work handle does
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
    done_cv_.notify_all();
  }

 private:
  std::function<void()> task_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
};

CommQueue::~CommQueue() { stop(); }

std::shared_ptr<Work> CommQueue::submit(std::function<void()> task) {
  auto job = std::make_shared<Job>(std::move(task));
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) {
    stopping_ = false;
    thread_ = std::thread([this] { loop(); });
    thread_id_ = thread_.get_id();
  }
  jobs_.push_back(job);
  wake_.notify_one();
  return job;
}

void CommQueue::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    std::shared_ptr<Job> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_ = true;
    lock.unlock();
    job->run();
    job.reset();
    lock.lock();
    running_ = false;
    if (jobs_.empty()) idle_.notify_all();
  }
}

void CommQueue::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  if (std::this_thread::get_id() == thread_id_) return;
  idle_.wait(lock, [&] { return jobs_.empty() && !running_; });
}

bool CommQueue::on_comm_thread() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_.joinable() && std::this_thread::get_id() == thread_id_;
}

void CommQueue::stop() {
  drain();
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    wake_.notify_one();
    thread = std::move(thread_);
    thread_id_ = {};
  }
  thread.join();
}

std::shared_ptr<Work> queue_all_reduce(CommQueue& queue, ProcessGroup& group, const Tensor& tensor,
                                       ReduceOp op, WireFormat wire) {
  return queue.submit([&group, t = tensor, op, wire]() mutable {
    group.ProcessGroup::all_reduce_async(t, op, wire)->wait();
  });
}

std::shared_ptr<Work> queue_reduce(CommQueue& queue, ProcessGroup& group, const Tensor& tensor,
                                   int dst, ReduceOp op, WireFormat wire) {
  return queue.submit([&group, t = tensor, dst, op, wire]() mutable {
    group.ProcessGroup::reduce_async(t, dst, op, wire)->wait();
  });
}

std::shared_ptr<Work> queue_all_gather(CommQueue& queue, ProcessGroup& group,
                                       const std::vector<Tensor>& outputs, const Tensor& input) {
  return queue.submit(
      [&group, out = outputs, input]() mutable { group.all_gather(out, input); });
}

std::shared_ptr<Work> queue_reduce_scatter(CommQueue& queue, ProcessGroup& group,
                                           const Tensor& output, const std::vector<Tensor>& inputs,
                                           ReduceOp op) {
  return queue.submit([&group, out = output, inputs, op]() mutable {
    group.reduce_scatter(out, inputs, op);
  });
}

}  // namespace lockstep::dist::detail
