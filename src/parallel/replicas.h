// The replicas of a DataParallel (internal): the copies of the wrapped module, their flat
// parameter views, the device workers that run them, and the one block every training path runs
// on replica k (copy-in, the replica context, forward, loss, weighted backward). The gather path
// (data_parallel_forward.cpp), the reducer path (data_parallel_reducer.cpp) and deterministic mode
// (data_parallel_deterministic.cpp) all run their replicas through it.
//
// Buffers follow torch.nn.DataParallel (torch/nn/parallel/data_parallel.py, replicate.py,
// torch/csrc/cuda/comm.cpp's broadcast_coalesced): replica 0's buffers are the module's own
// tensors, so an in-place update made in its forward (BatchNorm's running_mean.mul_().add_(),
// num_batches_tracked.add_(1)) is the module's update, seen by state_dict(), checkpoints and
// eval(); replicas k > 0 receive the module's buffer values before each forward and their own
// updates are dropped. A forward that replaces a buffer tensor instead of updating it in place is
// not seen, as in PyTorch.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "lockstep/dist/process_group.h"
#include "lockstep/nn/module.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/data_parallel.h"
#include "lockstep/parallel/flat_buffer.h"
#include "lockstep/parallel/worker.h"

namespace lockstep::parallel::detail {

class ReplicaSet {
 public:
  // Clones `module` (on devices[0], its parameters already in `master`) onto every device; a CPU
  // replica's parameters alias the master's buffer, a GPU replica gets its own. `threads`: the
  // intra-op threads of each worker.
  ReplicaSet(nn::Module& module, FlatBuffer& master, const std::vector<Device>& devices,
             int threads);
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  std::size_t size() const { return replicas_.size(); }
  const std::shared_ptr<nn::Module>& module(std::size_t k) const { return replicas_.at(k); }
  FlatBuffer& flat(std::size_t k) { return flat_[k]; }
  const FlatBuffer& flat(std::size_t k) const { return flat_[k]; }
  Device device(std::size_t k) const { return devices_[k]; }
  void train(bool on);
  // Gives every replica's module, and each of its submodules, the training mode of the wrapped
  // module's counterpart: torch.nn.DataParallel replicates the module on every forward
  // (torch/nn/parallel/replicate.py copies `training`), so `dp.module.eval()` or a submodule's
  // own mode reaches the replicas; ours are kept between calls, so each call copies the modes.
  // A comparison per module when nothing changed.
  void follow_modes();
  // The group member of each replica that run() installs as dist::current_group() for its task.
  void set_groups(std::vector<std::shared_ptr<dist::ProcessGroup>> groups) {
    groups_ = std::move(groups);
  }
  // Called with k on replica k's worker right after a task of run() that failed aborted its
  // group (see run()), before the abort is cleared: DataParallel waits there for the gradient
  // reductions replica k started (GradientReducer::discard). Must not throw.
  void set_on_abort(std::function<void(std::size_t)> on_abort) { on_abort_ = std::move(on_abort); }

  // Runs f(k) for k in [0, n) concurrently and waits for all; rethrows the first error (in device
  // order) as the same type with the device named. Under a module that runs collectives, a task
  // that throws aborts its group (ProcessGroup::abort), so siblings waiting for it in a
  // collective throw too instead of waiting forever; the groups are cleared once all are done. Each
  // task runs under the caller's autocast setting. With one device the task runs on the calling
  // thread (as torch.nn.DataParallel does with one device: no thread hand-off), under the worker's
  // intra-op thread count and with the caller's thread-local modes restored afterwards; replica k's
  // group member is dist::current_group() during f(k); `single_thread` (deterministic mode: one
  // BLAS call per GEMM) keeps it on the worker, whose thread count is then 1.
  void run(std::size_t n, const std::function<void(std::size_t)>& f, bool single_thread = false);

  // Whether replica k holds its own copy of the parameters, and the bytes copy_in(k) copies for
  // the first `n` replicas.
  bool copies_master(std::size_t k) const;
  std::int64_t parameter_copy_bytes(std::size_t n) const;
  // Sets every gradient of replica k (of its slot j, see run_shards) to none (its flat view's
  // parameters: no module walk).
  void clear_grads(std::size_t k, std::size_t j = 0) {
    for (auto& p : slot_flat(k, j).params) p.set_grad(Tensor());
  }

  // Deterministic mode's shards: runs shard(k, j, s) for every shard s, device k's being
  // [ranges[k].first, ranges[k].second) and j = s - ranges[k].first its place there, each with
  // groups[s] as dist::current_group(), under one intra-op thread. Not `concurrent`: device k's
  // worker runs on_device(k), then its shards one after another on replica k (slot 0). With
  // `concurrent` (a module that runs collectives, nn::Module::runs_collectives()) every shard
  // runs at once, so that they all reach a collective: shard j of device k on slot (k, j), which
  // is replica k on its worker for j = 0 and for j > 0 a clone of it sharing its parameter
  // memory, on a worker of its own (made on first use, then kept); on_device(k) runs on the
  // calling thread first. Concurrent shards need CPU devices (DeviceError on GPUs). Errors as
  // run()'s.
  using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;
  void run_shards(const Ranges& ranges, bool concurrent,
                  const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups,
                  const std::function<void(std::size_t k)>& on_device,
                  const std::function<void(std::size_t k, std::size_t j, std::size_t s)>& shard);
  // Slot j of device k (slot 0: replica k).
  nn::Module& slot_module(std::size_t k, std::size_t j) {
    return j == 0 ? *replicas_[k] : *slots_[k][j - 1].module;
  }
  FlatBuffer& slot_flat(std::size_t k, std::size_t j) {
    return j == 0 ? flat_[k] : slots_[k][j - 1].flat;
  }
  // Replica k's parameters from the master buffer (one copy where memory is not shared).
  void copy_in(std::size_t k);

  // Before a step on the calling thread (buffers, see above): replica 0 shares the module's
  // buffer tensors (again, if the module replaced one: to(), set_data), replicas 1..n-1 get their
  // values. Nothing to do for a module without buffers.
  void push_buffers(std::size_t n);
  bool has_buffers() const { return buffer_count_ > 0; }

  // Rows [start, start + size) of `t` (detached) on replica k's device.
  Tensor piece_of(const Tensor& t, std::int64_t start, std::int64_t size, std::size_t k) const;
  // The same rows of every tensor argument; plain values unchanged (scatter_gather.h).
  nn::Args piece_args(const nn::Args& args, std::int64_t start, std::int64_t size,
                      std::size_t k) const;
  // The replica block of every training path, on replica k's worker: forward_args of `x` under
  // the dropout key, the loss of its outputs against `y`, backward of loss · weight (gradients
  // land on replica k's parameters). Returns the unweighted loss (0-d, detached); with weight 0
  // (nothing of the chunk counts, or no rows) the result is undefined and only the forward runs,
  // under no_grad, but for a module that runs collectives (nn::Module::runs_collectives()),
  // which also backpropagates zeros to meet the backward's collectives. ShapeError when the loss
  // is not a scalar; AutogradError when it does not depend on a parameter that requires grad.
  // On slot j of device k (run_shards) for j > 0.
  Tensor train_piece(std::size_t k, const nn::Args& x, const Tensor& y, const DropoutKey& key,
                     double weight, const ArgsLossFn& loss_fn, std::size_t j = 0);
  // The same block on the wrapped module itself (its gradients land on the module's own
  // parameters, accumulated into a .grad they hold): DataParallel's one-CPU-device path, which
  // runs the module as torch.nn.DataParallel does with one device.
  Tensor train_module(const nn::Args& x, const Tensor& y, const DropoutKey& key, double weight,
                      const ArgsLossFn& loss_fn);

  // Deterministic mode keeps one buffer update per step, the one of the step's first shard: every
  // shard's forward starts from the buffers as they were when the step began.
  class ShardBuffers {
   public:
    // Snapshots the module's buffers onto each of the first n replicas' devices.
    ShardBuffers(ReplicaSet& set, std::size_t n);
    // Before a shard's forward on `m`, a replica or slot of device k (`first`: the step's
    // first shard, on replica 0).
    void before(nn::Module& m, std::size_t k, bool first);
    // After that forward.
    void after(nn::Module& m, bool first);
    // On the calling thread once the workers are done: the module keeps the first shard's update.
    void finish();

   private:
    ReplicaSet& set_;
    bool active_;
    std::vector<std::vector<Tensor>> start_;  // per replica, on its device
    std::vector<Tensor> kept_;                // the first shard's result
  };

 private:
  Tensor train_on(nn::Module& m, const std::vector<Tensor>& params, const nn::Args& x,
                  const Tensor& y, const DropoutKey& key, double weight, const ArgsLossFn& loss_fn);
  // f on `worker` for device k with `group` as dist::current_group(), under the caller's
  // autocast setting (captured here), one intra-op thread if `single_thread`; an error aborts
  // `group` where the module runs collectives (run()).
  TaskHandle submit(DeviceWorker& worker, std::size_t k, dist::ProcessGroup* group,
                    bool single_thread, std::function<void()> f);
  // Waits for every task (task t ran for device device_of[t] with groups[t], which are cleared of
  // an abort once all are done); rethrows the first error in task order, prefixed with its device.
  void wait_all(std::vector<TaskHandle>& tasks, const std::vector<std::size_t>& device_of,
                const std::vector<dist::ProcessGroup*>& groups = {}) const;
  std::vector<Tensor> module_buffers() const;
  static std::vector<Tensor> buffers_of(const nn::Module& m);

  nn::Module& module_;
  // The wrapped module's tree and each replica's, in the same pre-order (follow_modes).
  std::vector<nn::Module*> module_tree_;
  std::vector<std::vector<nn::Module*>> replica_trees_;
  FlatBuffer& master_;
  std::vector<Device> devices_;
  int threads_;
  // The module's buffers when wrapped (the replicas were cloned with these; none: nothing to do
  // per step, not even listing them).
  std::size_t buffer_count_ = 0;
  std::vector<std::shared_ptr<nn::Module>> replicas_;
  std::vector<FlatBuffer> flat_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups_;
  std::function<void(std::size_t)> on_abort_;
  // run_shards' slots j > 0, per device.
  struct Slot {
    std::shared_ptr<nn::Module> module;
    FlatBuffer flat;
    std::unique_ptr<DeviceWorker> worker;
  };
  std::vector<std::vector<Slot>> slots_;
};

}  // namespace lockstep::parallel::detail
