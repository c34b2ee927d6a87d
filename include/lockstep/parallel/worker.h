// DeviceWorker: the one persistent thread that runs a device's work (a replica's forward and
// backward). Tasks run in submission order; the worker's intra-op thread count is fixed at
// construction (DataParallel gives each of N replicas on C cores max(1, C / N)).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "lockstep/core/device.h"

namespace lockstep::parallel {

/// Completion of one submitted task (what std::future<void> is for std::packaged_task). Unlike a
/// packaged_task's shared state, the worker drops every reference to the task's exception before
/// it signals completion, so the waiting thread is the exception's only owner: it is destroyed on
/// the thread that handled it, never concurrently on the worker (ThreadSanitizer cannot see the
/// uninstrumented reference counting of std::exception_ptr).
class TaskHandle {
 public:
  /// Blocks until the task has run; rethrows the exception it threw, if any (once).
  void get();

 private:
  friend class DeviceWorker;
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  std::shared_ptr<State> state_;
};

class DeviceWorker {
 public:
  DeviceWorker(Device device, int intra_op_threads);
  /// Runs the tasks already queued, then joins the thread.
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  Device device() const { return device_; }
  int intra_op_threads() const { return threads_; }
  /// Queues `task`; the handle's get() returns when it has run and rethrows its exception.
  TaskHandle submit(std::function<void()> task);

 private:
  void loop();
  Device device_;
  int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<TaskHandle::State> state;
  };
  std::deque<Task> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lockstep::parallel
