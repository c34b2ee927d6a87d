// DataParallel: one process, several devices (torch.nn.DataParallel). The wrapped module is
// copied once onto every device; each forward splits the batch along dim 0 like
// torch.tensor_split (sizes differ by at most one, larger first: 9 on 4 devices -> 3,2,2,2), runs
// the replicas concurrently on their devices' worker threads and gathers the outputs on the
// output device. Autograd flows back through gather and scatter: backward runs every replica's
// backward concurrently and leaves the summed gradient on the wrapped module's own parameters.
//
// Two training paths give the same gradients (allclose; bit-identical in deterministic mode):
//   forward(x) + loss.backward()        the PyTorch path: the loss is computed on the gathered
//                                       output, its gradient scattered back to the replicas;
//   forward_backward(x, y, loss_fn)     the reducer path (what the CLI uses): each replica
//                                       computes loss_fn on its own chunk scaled by b_k / B and
//                                       a GradientReducer all-reduces bucketed gradients over a
//                                       ProcessGroup while backward runs; no output gather.
// Either way the caller then steps its optimizer on the calling thread (optimizer->step()).
//
// Devices: CPU devices (cpu:k, logical workers sharing RAM: replicas read the master's
// parameters in place, gradients are reduced by the in-process "threads" ProcessGroup) or CUDA
// devices (cuda:k, never mixed with CPU devices): each replica lives on its GPU, receives the
// master's flat parameter buffer (on device_ids[0]) by one device copy per step, and the reducer
// sums gradients over an NCCL group made with ncclCommInitAll (dist::new_nccl_group), reducing to
// device_ids[0]; a process_group (DistributedDataParallel) must be an NCCL group on the one GPU
// listed (see distributed.h). The GPU path is verified by compilation and by the GPU tests, which
// need a GPU (tests/cuda/).
//
// Buffers (BatchNorm's running statistics), as torch.nn.DataParallel keeps them: replica 0's
// buffers are the wrapped module's own tensors, so the in-place updates its forward makes are
// the module's (state_dict(), checkpoints and eval() see them); replicas k > 0 receive the
// module's buffer values before each forward and their own updates are dropped. A forward that
// replaces a buffer tensor instead of updating it in place is not seen (as in PyTorch). In
// deterministic mode a step keeps one update, the one its first shard makes (every other shard's
// forward starts from the buffers as the step found them), so the buffers too are the same for
// every device count. While a replica runs, dist::current_group() is the group of the
// wrapper's replicas (in deterministic mode: of the step's shards; dist/current_group.h), for
// modules that run collectives in forward or backward (nn::Module::runs_collectives()).
//
// One CPU device: forward_backward runs the wrapped module itself on the calling thread (no
// replica, no reducer), as torch.nn.DataParallel does with one device, so it costs little more
// than the plain module's step and its gradients are autograd's own (accumulated into a .grad the
// parameters hold); deterministic mode, no_sync() and DistributedDataParallel keep their paths,
// and so does forward(): they run replica 0, which shares the module's parameters and buffers
// but is a clone made at construction. So, unlike PyTorch's one-device DataParallel, those paths
// do not see a module changed after wrapping (a submodule replaced, a plain member set): change
// the module before wrapping it. Training modes do follow, as PyTorch's: every call gives each
// replica's submodules the modes of the module's (module->eval(), a submodule's own train(false)
// reach the replicas, as DataParallel::train()/eval() do). An exception in the
// module's backward on this path leaves the gradients it had already accumulated into .grad
// (autograd's own behaviour); the replica paths leave .grad untouched.
//
// Deterministic mode (options.deterministic): the global batch is cut into shards of
// options.shard_size samples, independent of the device count; each shard's gradient is computed
// on its own with the same shapes wherever it runs, and shard gradients are combined by one fixed
// pairwise tree over shard indices (include/lockstep/ops/detail/tree_sum.h). Final parameters are then
// bit-identical for any number of devices. Cost: per-shard GEMMs (smaller, less efficient) and a
// [shards, parameters] buffer (float32/float64, the parameters' dtype) on device_ids[0]. On GPUs
// the same plan: shard gradients are computed on each GPU, their rows copied to device_ids[0]
// after the workers finish and summed there by a CUDA kernel walking the same tree, so the bits
// equal for every GPU count — on GPUs of one model and SM count with one CUDA toolkit, per
// cuBLAS's reproducibility statement (docs/cuda.md, "Deterministic mode on GPUs"); GPU and CPU
// runs agree within tolerance only (different GEMM libraries).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "lockstep/dist/process_group.h"
#include "lockstep/nn/loss.h"
#include "lockstep/nn/module.h"
#include "lockstep/parallel/flat_buffer.h"
#include "lockstep/parallel/gradient_reducer.h"
#include "lockstep/parallel/worker.h"

namespace lockstep::parallel {

namespace detail {
class ReplicaSet;
}

struct DataParallelOptions {
  /// Bit-identical results for any device count, on CPU devices and on GPUs alike (see above).
  bool deterministic = false;
  /// Samples per shard in deterministic mode.
  std::int64_t shard_size = 8;
  /// Reducer bucket capacity in bytes and whether buckets reduce during backward (`scatter`:
  /// with a process_group and one device only, ValueError otherwise; see distributed.h).
  ReducerOptions reducer{};
  /// Seed of the dropout masks, keyed by (seed, step, global sample index).
  std::uint64_t seed = 0;
  /// Intra-op threads per replica; 0: max(1, usable cores / number of devices).
  int threads_per_device = 0;
  /// The ranks this process trains with (DistributedDataParallel sets it; null: this process
  /// alone). With a group, gradients are reduced over this process's devices and then over the
  /// group's ranks, and losses are weighted by the global batch (see DistributedDataParallel).
  std::shared_ptr<dist::ProcessGroup> process_group;
};

/// Loss of one replica's chunk: (output [b_k, ...], target [b_k, ...]) -> mean loss (0-d).
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

/// Loss of one replica's outputs (forward_args: each [b_k, ...], or 0-d) against its target chunk
/// [b_k, ...] -> mean loss (0-d).
using ArgsLossFn = std::function<Tensor(const std::vector<Tensor>& outputs, const Tensor& target)>;

/// How many terms a chunk's mean loss averages over, from its target (default: its rows). The
/// reducer path weights chunk k's loss by count_k / Σ count, so the weighted sum is the mean
/// over the global batch also when some targets are ignored.
using LossCount = std::function<std::int64_t(const Tensor& target)>;

/// Default devices (torch.nn.DataParallel's default is every visible GPU): every CUDA device
/// (cuda:0 ... cuda:G-1) when this build has CUDA and cuda::device_count() = G > 0, otherwise
/// one CPU device per usable core (cpu:0 ... cpu:C-1).
std::vector<Device> default_devices();

/// Parses "cpu:0,cpu:1,cpu:2" into devices. DeviceError naming the bad entry, ValueError for
/// an empty list or a device listed twice.
std::vector<Device> parse_devices(const std::string& list);

class DataParallel : public nn::Module {
 public:
  /// Wraps `module` (which must support clone(): derive from nn::Cloneable<T> or use
  /// nn::Sequential) on `device_ids` (default: default_devices()), gathering on `output_device`
  /// (default device_ids[0]). The module's parameters move into one flat buffer in place, so
  /// optimizers built before or after wrapping hold the same tensors. Throws ValueError for no
  /// devices listed twice, DeviceError for an unavailable one, Error if the module cannot be
  /// cloned. An empty `device_ids` means default_devices(). DeviceError for CPU and CUDA devices
  /// mixed; on CUDA devices with a process_group (DistributedDataParallel): ValueError for more
  /// than one device, DeviceError unless the group is an NCCL group on that device made through a
  /// bootstrap group (dist::new_nccl_group(bootstrap, device)); ValueError for shard_size < 1;
  /// NcclError when NCCL cannot set up the GPUs.
  explicit DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids = {},
                        std::optional<Device> output_device = std::nullopt,
                        DataParallelOptions options = {});
  ~DataParallel() override;

  /// input [B, ...] -> gathered output [B, ...] on the output device. Only min(B, N) replicas run.
  /// Errors raised inside a replica reach the caller as the same type, prefixed with the device.
  /// The replicas run through nn::Module::forward_args({input}) (whose default calls forward), so
  /// a module that overrides forward_args is run through it here too and must return one output.
  Tensor forward(const Tensor& input) override;
  /// PyTorch's DataParallel.forward(*inputs) for a module with several inputs or outputs
  /// (nn::Module::forward_args): every tensor argument [B, ...] is split along dim 0 with the same
  /// sizes (torch.tensor_split), every other argument goes to every replica unchanged; each output
  /// is gathered on the output device, a batched one along dim 0 ([B, ...]), a 0-d one into a
  /// vector [P] with one value per piece that ran (P = min(B, N) replicas; in deterministic mode
  /// one per shard), as torch.nn.parallel.gather does. Autograd flows through every floating-point
  /// output that requires grad (they must share a dtype: DTypeError otherwise) to the parameters
  /// and to every tensor input that requires grad; other outputs (an int64 argmax) are returned as
  /// gathered. A chunk whose targets are all ignored still runs its forward (forward_backward).
  /// ShapeError when no argument is a tensor, a tensor argument is 0-d or they disagree on dim 0,
  /// or a replica returns a batched output without its chunk's rows or a different number or kind
  /// of outputs than another.
  std::vector<Tensor> forward_args(const nn::Args& inputs) override;

  /// The reducer path: runs forward, loss_fn(output_k, target_k) · w_k and backward on every
  /// replica (w_k = count_k / Σ count, count_k = b_k unless `count` says otherwise), all-reduces
  /// the gradients and adds them into the wrapped module's .grad (creating it where none). The
  /// optimizer step stays the caller's, as with PyTorch's DDP (loss.backward() there):
  ///   optimizer->zero_grad();
  ///   Tensor loss = dp.forward_backward(x, y, criterion);
  ///   nn::utils::clip_grad_norm_(dp.parameters(), max_norm);  // if wanted
  ///   optimizer->step();
  /// Returns the mean loss over the global batch (0-d, no graph; NaN when nothing counts, as
  /// PyTorch's mean over no elements). ShapeError when input and target disagree on dim 0 or the
  /// loss is not a scalar; AutogradError when the loss does not depend on the parameters;
  /// ValueError when a wrapped parameter was frozen or unfrozen (requires_grad changed) after
  /// wrapping (forward() too, unless grad mode is off): wrap the module again instead.
  Tensor forward_backward(const Tensor& input, const Tensor& target, const LossFn& loss_fn,
                          const LossCount& count = {});
  /// Several inputs and outputs (the module overrides nn::Module::forward_args): every tensor in
  /// `inputs` is split along dim 0 like the target (tensor_split sizes), plain values go to every
  /// replica unchanged, and loss_fn gets the replica's outputs. Otherwise as above; ShapeError
  /// also when a tensor input is 0-d or disagrees with the target on dim 0.
  Tensor forward_backward(const nn::Args& inputs, const Tensor& target, const ArgsLossFn& loss_fn,
                          const LossCount& count = {});
  /// CrossEntropyLoss: chunks are weighted by their targets that are not ignore_index.
  Tensor forward_backward(const Tensor& input, const Tensor& target,
                          const nn::CrossEntropyLoss& loss);

  std::shared_ptr<nn::Module> module() const { return module_; }
  const std::vector<Device>& device_ids() const { return devices_; }
  Device output_device() const { return output_device_; }
  const DataParallelOptions& options() const { return options_; }
  /// The master parameters' flat buffer (the wrapped module's parameters are views of it) and
  /// the gradient reducer's buckets as element ranges [lo, hi) of it, in reduction order: what
  /// ZeroRedundancyOptimizer partitions (zero_layout, zero_redundancy_optimizer.h).
  const FlatBuffer& flat_parameters() const { return master_; }
  std::vector<std::pair<std::int64_t, std::int64_t>> gradient_buckets() const;
  /// The replica on device i (tests and benchmarks inspect them).
  std::shared_ptr<nn::Module> replica(std::size_t i) const;
  /// Parameter bytes copied to replicas (none for CPU devices, which read the master's memory)
  /// plus gradient and has-grad-flag bytes reduced in the last step.
  std::int64_t bytes_moved_last_step() const { return bytes_moved_; }

  /// The step counter that keys dropout masks by (options.seed, step, global sample index).
  /// It starts at 0 and increases by one on every forward_backward() call (reducer path and
  /// deterministic mode alike, also for an empty batch, counted once its input and
  /// wrapped-parameter checks pass, even if the step then fails) and on every forward() call while
  /// the wrapper is in training mode (grad mode does not matter); forward() in eval mode uses the
  /// current value without increasing it. A call's masks use the value before its increase, so
  /// after n training steps step_count() is n and the next step uses key n.
  std::uint64_t step_count() const { return step_; }
  /// Sets the counter, e.g. to the step_count() saved in a checkpoint: a wrapper restored with
  /// the same parameters, options and devices then draws the same dropout masks as the original
  /// run, so resumed training is bit-identical to an uninterrupted one.
  void set_step_count(std::uint64_t step) { step_ = step; }

  /// RAII guard returned by no_sync(); restores the previous setting when destroyed.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DataParallel& dp) : dp_(dp), prev_(dp.require_sync_) {
      dp.require_sync_ = false;
    }
    ~NoSyncGuard() { dp_.require_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DataParallel& dp_;
    bool prev_;
  };
  /// torch.nn.parallel.DistributedDataParallel.no_sync(): while the returned guard lives,
  /// forward_backward() runs forward and backward on every replica but does not reduce: each
  /// replica adds its gradients into a local accumulation buffer (one flat buffer per replica,
  /// allocated on first use), and the wrapped module's .grad is not touched. The first
  /// forward_backward() outside the guard seeds its reduction with those buffers, so everything
  /// accumulated is all-reduced once, together with its own gradients, and added into .grad.
  /// The result is the sum of the calls' gradients, as K plain forward_backward() calls give
  /// (allclose: the summation order differs). Use: K−1 calls inside the guard, the K-th outside.
  ///   { auto guard = dp.no_sync(); dp.forward_backward(x1, y1, loss); }
  ///   dp.forward_backward(x2, y2, loss);   // reduces the gradients of both batches
  /// Each call's losses keep their own weights (count_k / Σ count of that call's batch) and its
  /// return value is its own mean loss. Accumulated gradients stay pending until a synced
  /// forward_backward(): zero_grad() and optimizer steps do not see or clear them. A call
  /// inside the guard that throws adds nothing (the pending gradients are those of the calls
  /// that succeeded). The gather path (forward() + backward()) ignores the guard and always
  /// sums gradients into .grad. Deterministic mode: a documented no-op — every call reduces
  /// with its fixed tree and adds into .grad, which keeps bit-identity across device counts
  /// (bit-identical to K plain calls). Guards nest; the outermost one's end restores syncing.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  /// False while a no_sync() guard lives (DDP's require_backward_grad_sync).
  bool require_backward_grad_sync() const { return require_sync_; }

  std::string name() const override { return "DataParallel"; }
  // The wrapped module's names, with no "module." prefix.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const override;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const override;
  StateDict state_dict() const override;
  /// Also accepts keys prefixed with "module." (as PyTorch's DataParallel writes them).
  void load_state_dict(const StateDict& state, bool strict = true) override;
  void train(bool on = true) override;
  void to(Device device) override;
  void to(DType dtype) override;
  void zero_grad() override;
  std::shared_ptr<nn::Module> clone() const override;

 protected:
  struct Shard {
    std::int64_t start, size;
  };

  // ---- the rank protocol ----------------------------------------------------------------------
  // What a step agrees with the other ranks. A DataParallel alone agrees with itself (the
  // defaults below); DistributedDataParallel overrides these hooks (distributed.cpp) and this
  // class holds no rank logic of its own.
  struct LocalStep {
    std::int64_t pieces = 0;   // gradient pieces (deterministic mode: shards) of the local batch
    std::int64_t count = 0;    // terms the local loss averages over
    std::int64_t samples = 0;  // rows of the local batch
    bool sync = true;          // require_backward_grad_sync()
    // The local batch itself (the reducer path sets them): DistributedDataParallel remembers its
    // shapes for join()'s shadow steps under a module that runs collectives.
    const nn::Args* inputs = nullptr;
    const Tensor* target = nullptr;
  };
  struct GlobalStep {
    double count = 0;             // terms the step's mean loss averages over (all ranks)
    std::int64_t row_offset = 0;  // this rank's first row in the global batch (dropout keys)
    bool sync = true;             // whether the step reduces (the active ranks' no_sync())
    bool done = false;            // every rank has joined: the step computes nothing
    std::vector<std::int64_t> rank_pieces;  // pieces per rank (deterministic mode's rows)
  };
  // At the start of forward_backward(), once the local batch is planned.
  virtual GlobalStep begin_step(const LocalStep& mine);
  // At its end: the step's mean loss from this rank's weighted share.
  virtual double end_step(double share) { return share; }
  // Deterministic mode: the step's shard gradient rows `slots` [rows, parameters], their
  // has-gradient flags and weighted losses, in global shard order (across ranks: every rank's,
  // gathered; alone: as they are).
  struct ShardRows {
    Tensor rows;
    std::vector<std::vector<char>> had;
    std::vector<double> losses;
  };
  virtual ShardRows gather_shards(ShardRows local, const GlobalStep& step) { return local; }
  // The gather path's backward: the flat gradient summed over this process's replicas and its
  // has-gradient flags (across ranks: averaged over ranks, flags agreed).
  virtual void reduce_gather_grads(Tensor& total, std::vector<char>& has) {}
  // Before the gather path's forward().
  virtual void before_forward() {}
  // Deterministic mode's gather path: every rank's shard count in this forward into
  // `rank_shards` (this process's is `mine`) and the ranks' group, or null with {mine} when the
  // shards span this process only (alone; DistributedDataParallel's forwards that run no
  // collective, under no_grad or eval()).
  virtual std::shared_ptr<dist::ProcessGroup> forward_shard_ranks(
      std::int64_t mine, std::vector<std::int64_t>& rank_shards) {
    rank_shards = {mine};
    return nullptr;
  }
  // Whether this rank has joined (DistributedDataParallel::join): its steps shadow the others'.
  virtual bool joined() const { return false; }

  // ---- the training paths (data_parallel_{forward,reducer,deterministic}.cpp) ----
  // How a batch is cut: pieces (samples [start, start + size)) and, per device, the range of
  // pieces it processes.
  struct Plan {
    std::vector<Shard> pieces;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
  };
  Plan plan(std::int64_t batch) const;
  std::vector<Shard> shards(std::int64_t batch) const;
  std::vector<std::pair<std::size_t, std::size_t>> shard_ranges(std::size_t nshards) const;
  // Raw per-piece counts (count_s, or b_s without `count`).
  std::vector<double> piece_counts(const std::vector<Shard>& pieces, const Tensor& target,
                                   const LossCount& count) const;
  // Before each step: a master parameter whose data was replaced (`set_data`, PyTorch's
  // `param.data = ...`) is copied back into the flat buffer; one moved to another device or
  // reshaped is an error; so is one frozen / unfrozen (requires_grad changed) since wrapping when
  // the step computes gradients (`gradients`).
  void check_master(bool gradients);
  // Copies the gradients of `from` (replica k's parameters, or a shard slot's on device k) into
  // row `row` of `rows` (device k's block, see row_blocks), marking in `had` (one flag per
  // parameter) which parameters had one.
  void store_piece_grads(const FlatBuffer& from, std::size_t k, const Tensor& rows,
                         std::int64_t row, std::vector<char>& had);
  // Per device k of the plan, the [pieces of k, parameters] block its worker writes its pieces'
  // gradient rows into: rows [ranges[k].first, ranges[k].second) of `slots` itself where device k
  // writes slots' memory directly (slots' own device; CPU devices, which share RAM), otherwise a
  // zeroed buffer on device k that gather_rows copies into `slots` on the calling thread once the
  // workers are done (made by a worker, a copy between GPUs would wait for the other GPU's
  // stream, and may wait for an NCCL call there).
  std::vector<Tensor> row_blocks(const Tensor& slots, const Plan& pl) const;
  // Returns the bytes copied.
  std::int64_t gather_rows(const Tensor& slots, const std::vector<Tensor>& blocks,
                           const Plan& pl) const;
  // Sums the rows of `slots` into row 0 with the fixed tree of include/lockstep/ops/detail/tree_sum.h (on the
  // CPU with its columns split over the workers, on a GPU by one kernel launch, the same bits);
  // returns, per parameter, whether any piece produced a gradient.
  std::vector<char> reduce_slots(const Tensor& slots, const std::vector<std::vector<char>>& had);
  Tensor forward_backward_deterministic(const nn::Args& inputs, const Tensor& target,
                                        const ArgsLossFn& loss_fn, const LossCount& count);
  void accumulate_master_grads(const Tensor& flat_grad, const std::vector<char>& has_grad);
  // Before the reducer path overwrites master_grad_ (replica 0's reducer buffer): when a .grad
  // handed out from it is still alive (held by a parameter that was not zero_grad()ed, or by the
  // caller), replica 0's reducer gets a fresh buffer, so that tensor keeps its values and a
  // parameter's .grad is accumulated into in place, as PyTorch does.
  void renew_master_grad_if_held();
  // no_sync(): adds replica k's gradients into its accumulation buffer and clears them.
  void accumulate_local(std::size_t k);
  // no_sync(): after reducers_[k]->prepare(), seeds replica k's reducer with its pending buffer.
  void seed_from_local(std::size_t k);
  // The reducer path (forward_backward without deterministic mode).
  Tensor forward_backward_reducer(const nn::Args& inputs, const Tensor& target,
                                  const ArgsLossFn& loss_fn, const LossCount& count);
  // The one-device path (data_parallel_one_device.cpp): one CPU device, no process group, not
  // deterministic, synced with nothing pending from no_sync(); the wrapped module itself runs.
  bool one_device_path() const;
  Tensor forward_backward_one_device(const nn::Args& inputs, const Tensor& target,
                                     const ArgsLossFn& loss_fn, const LossCount& count);
  // ValueError unless the reducer path's step can be captured into a CUDA graph: one GPU, no
  // process group, synced (no no_sync() pending), a non-empty batch.
  void check_graph_capturable(std::int64_t batch) const;

  std::shared_ptr<nn::Module> module_;
  std::vector<Device> devices_;
  Device output_device_;
  DataParallelOptions options_;
  FlatBuffer master_;
  Tensor master_grad_;
  // The .grad views of master_grad_ handed to master parameters (see renew_master_grad_if_held).
  std::vector<std::weak_ptr<TensorImpl>> handed_out_;
  std::unique_ptr<detail::ReplicaSet> replicas_;
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups_;
  std::vector<std::unique_ptr<GradientReducer>> reducers_;
  std::uint64_t step_ = 0;
  // no_sync() state: whether forward_backward reduces, per-replica local gradient sums (flat,
  // in the replica's layout) and which parameters they hold.
  bool require_sync_ = true;
  bool local_pending_ = false;
  std::vector<Tensor> local_grad_;
  std::vector<std::vector<char>> local_has_;
  std::int64_t bytes_moved_ = 0;
  // Graphs recorded by forward() hold a weak reference: a backward after the wrapper is gone
  // throws instead of touching freed replicas.
  std::shared_ptr<char> alive_ = std::make_shared<char>(0);
};

}  // namespace lockstep::parallel

namespace lockstep::nn {
/// PyTorch's spelling: torch.nn.DataParallel.
using DataParallel = lockstep::parallel::DataParallel;
}  // namespace lockstep::nn
