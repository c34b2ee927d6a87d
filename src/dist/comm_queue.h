// A group member's communication thread (internal): the threads and mpi backends run the
// collectives started by ProcessGroup's *_async calls on it, one at a time in the order they were
// started (the group's order rule, process_group.h). The thread is made by the first submit();
// a member that never starts an asynchronous collective has none.
//
// The rule's other half is the caller's: a blocking collective of the member first calls drain(),
// which waits until every started collective is done (a no-op on the communication thread itself,
// which runs the started collectives through the same blocking code).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lockstep/dist/process_group.h"

namespace lockstep::dist::detail {

class CommQueue {
 public:
  CommQueue() = default;
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;
  /// Waits for the started collectives (they need their peers: a member destroyed while its peers
  /// never join its pending collectives waits for them, or for the backend's timeout or abort),
  /// then joins the thread.
  ~CommQueue();

  /// Runs `task` on the communication thread after every task submitted before it. The Work's
  /// wait() blocks until the task has returned and rethrows what it threw. The task holds what it
  /// needs (tensor handles); it is destroyed on the communication thread once it has run.
  std::shared_ptr<Work> submit(std::function<void()> task);
  /// Blocks until every submitted task has run. Returns at once on the communication thread and
  /// when nothing is pending.
  void drain();
  /// Whether the caller is this queue's communication thread.
  bool on_comm_thread() const;
  /// drain(), then ends the thread; a later submit() starts a new one.
  void stop();

 private:
  class Job;
  void loop();

  mutable std::mutex mu_;
  std::condition_variable wake_;  // the thread: a job arrived, or stop
  std::condition_variable idle_;  // drain(): the queue ran empty
  std::deque<std::shared_ptr<Job>> jobs_;
  bool running_ = false;  // the thread is running a job (popped from jobs_)
  bool stopping_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

// `group`'s blocking collective of the same name as a task on `queue`, with the base class's
// asynchronous default inside (so BFloat16 is the base class's emulation): the *_async overrides
// of a backend whose started collectives run its blocking code on its communication thread. The
// tasks hold the tensor handles; `group` must outlive `queue`.
std::shared_ptr<Work> queue_all_reduce(CommQueue& queue, ProcessGroup& group, const Tensor& tensor,
                                       ReduceOp op, WireFormat wire);
std::shared_ptr<Work> queue_reduce(CommQueue& queue, ProcessGroup& group, const Tensor& tensor,
                                   int dst, ReduceOp op, WireFormat wire);
std::shared_ptr<Work> queue_all_gather(CommQueue& queue, ProcessGroup& group,
                                       const std::vector<Tensor>& outputs, const Tensor& input);
std::shared_ptr<Work> queue_reduce_scatter(CommQueue& queue, ProcessGroup& group,
                                           const Tensor& output, const std::vector<Tensor>& inputs,
                                           ReduceOp op);

}  // namespace lockstep::dist::detail
