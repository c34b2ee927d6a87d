// DeviceWorker: the one persistent thread that runs a device's work (a replica's forward and
// backward). Tasks run in submission order; the worker's intra-op thread count is fixed at
// construction (DataParallel gives each of N replicas on C cores max(1, C / N)).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "lockstep/core/device.h"

namespace lockstep::parallel {

class DeviceWorker {
 public:
  DeviceWorker(Device device, int intra_op_threads);
  /// Runs the tasks already queued, then joins the thread.
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  Device device() const { return device_; }
  int intra_op_threads() const { return threads_; }
  /// Queues `task`; the future becomes ready when it has run and rethrows its exception.
  std::future<void> submit(std::function<void()> task);

 private:
  void loop();
  Device device_;
  int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lockstep::parallel
