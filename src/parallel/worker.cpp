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

void TaskHandle::get() {
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->done; });
    error = std::move(state_->error);
    state_->error = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

TaskHandle DeviceWorker::submit(std::function<void()> task) {
  TaskHandle handle;
  handle.state_ = std::make_shared<TaskHandle::State>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Task{std::move(task), handle.state_});
  }
  cv_.notify_one();
  return handle;
}

void DeviceWorker::loop() {
  set_num_threads(threads_);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // The exception is captured inside the handler but published only after the handler has
    // ended, so this thread holds no reference to it any more when the waiter wakes.
    std::exception_ptr error;
    try {
      task.fn();
    } catch (...) {
      error = std::current_exception();
    }
    task.fn = nullptr;  // captured state is released here, before completion is signalled
    {
      std::lock_guard<std::mutex> lock(task.state->mu);
      task.state->error = std::move(error);
      task.state->done = true;
    }
    task.state->cv.notify_all();
  }
}

}  // namespace lockstep::parallel
