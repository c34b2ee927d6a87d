#include "lockstep/parallel/worker.h"

#include "lockstep/core/parallel.h"

namespace lockstep::parallel {

DeviceWorker::DeviceWorker(Device device, int intra_op_threads)
    : device_(device), threads_(intra_op_threads < 1 ? 1 : intra_op_threads) {
  thread_ = std::thread([this] { loop(); });
}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::future<void> DeviceWorker::submit(std::function<void()> task) {
  std::packaged_task<void()> pt(std::move(task));
  auto fut = pt.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(pt));
  }
  cv_.notify_one();
  return fut;
}

void DeviceWorker::loop() {
  set_num_threads(threads_);
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace lockstep::parallel
