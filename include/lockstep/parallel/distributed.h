// DistributedDataParallel: one process per rank, each with its own data, training one model
// (torch.nn.parallel.DistributedDataParallel). Every rank builds the same module; construction
// broadcasts rank 0's parameters and buffers, so ranks start bit-identical whatever seed each
// used. A rank may drive several local CPU devices (DataParallel inside DDP).
//
// On GPUs (PyTorch's DistributedDataParallel(model, device_ids=[local_rank]) over an NCCL
// process group): one process per GPU, device_ids = {cuda:k} and a process group made by
// dist::new_nccl_group(bootstrap, cuda:k) (bootstrap: init_mpi()'s group under mpirun, or any
// CPU group). Parameters, the replica and the gradient buckets live on cuda:k; the buckets (and
// the has-grad flags riding in front of the last one) are all-reduced over NCCL, the broadcasts
// of construction and join() too; the per-step exchanges (sample counts, losses, the gather
// path's has-grad flags) and evaluate_exact's sums are CPU tensors, which the NCCL group sends to
// its bootstrap (dist/nccl.h). The gradient is the same as one process on the global batch
// (allclose: NCCL's reduction order, see nccl.h). Refused on GPUs: several GPUs per process
// (ValueError), any other group (DeviceError); see docs/cuda.md. Deterministic mode works on GPUs
// too (below; the rows are all-gathered over NCCL and summed by the tree kernel on each rank's
// GPU). Verified on a GPU by tests/cuda/ddp_cuda_test.cpp only where one is present.
//
// Training (the reducer path, what the CLI uses):
//   auto loss = ddp.forward_backward(x_local, y_local, criterion);   // every rank, same order
//   optimizer.step();
// Each rank's loss on its local batch is weighted by count_r / Σ_ranks count (one small
// all_gather at the start of the step exchanges the counts), its gradients are bucketed and
// all-reduced by GradientReducer while backward runs (local devices first, then across ranks),
// so .grad is the gradient of the mean loss over the global batch: the same as one process
// training on the concatenation of the ranks' batches (allclose; case C02/C03). Ranks may hold
// different numbers of samples in a step, including none (they contribute zero gradient). The
// returned loss is that global mean, identical on every rank; rank_losses() gives each rank's
// weighted share, so a NaN can be traced to its rank.
//
// Deterministic mode: each rank cuts its batch into shards of shard_size samples; all shard
// gradients are gathered and summed with the fixed pairwise tree over global shard indices, so
// when rank r's batch is a run of whole shards of the global batch (as the CLI splits it:
// parallel::split_batch), the final parameters are bit-identical to one process with one device
// on the global batch — and, as always, identical on every rank. Cost: an all_gather of
// [shards, parameters] per step instead of one all-reduce. On GPUs (NCCL group) the rows are
// gathered into buffers on the rank's GPU and the has-grad flags and shard losses over the
// bootstrap group; the result equals one process on one GPU bit for bit on GPUs of one model
// (docs/cuda.md, "Deterministic mode on GPUs").
//
// forward(x) + loss.backward() also works, with PyTorch DDP's semantics: the gradient is the mean
// over ranks of each rank's gradient of its own loss (all-reduced after this rank's backward).
// Under eval() / no_grad, forward() does no collective.
//
// Buffers (broadcast_buffers, default on; PyTorch's torch/nn/parallel/distributed.py): each rank's
// forward updates its own buffers (BatchNorm's running statistics from its local batch); the
// buffers of the lowest rank active in the step (rank 0 unless it has joined) are broadcast to
// every rank at the start of a training step, after the step's exchange, in one collective per
// dtype. The gate is PyTorch's require_forward_param_sync: a step broadcasts when the training
// step before it synchronized (the first step does), so with K-step accumulation the first
// micro-step inside no_sync() broadcasts and the later ones and the synced K-th do not; once per
// optimizer step, as in PyTorch. Deterministic mode reduces every call, so every step
// broadcasts. forward() under no_grad or eval() does no collective and leaves the gate as it is
// (PyTorch broadcasts before the first no_grad forward after training and then skips the first
// training step after the evaluation; a collective there hangs when only some ranks evaluate,
// and the gate would then differ between ranks): the first training step after an evaluation
// broadcasts. Call sync_buffers() before an evaluation that must see rank 0's buffers on every
// rank. Under join() the lowest active rank's buffers win (PyTorch picks the highest active
// rank); at its end the lowest rank active in the last real step broadcasts parameters and
// buffers (below).
//
// Uneven inputs (join semantics, torch's Join context): a rank that has run out of batches calls
// join(); until every rank has joined it shadows the others' steps, contributing zero gradient to
// every collective, so no rank hangs. When all have joined, the parameters and buffers of the
// lowest rank that took part in the last real step are broadcast to all (PyTorch's
// _sync_final_model), so every rank ends bit-identical. Every rank must call join() once after its
// last forward_backward() (optimizer state of a rank that joined early is not updated while it
// shadows, as in PyTorch). forward()+backward() does not take part in join. A shadow step counts 0
// samples, so the active ranks' gradient is the mean over their own samples of the step (the global
// count gathered at its start), as if the joined rank were absent. A shadow step runs no forward,
// except under a module that runs collectives inside forward or backward
// (nn::Module::runs_collectives(): SyncBatchNorm), whose replicas on the other ranks wait for this
// rank's: there the joined rank's replicas run each shadow step on 0 rows, shaped like the last
// batch this rank trained with forward_backward() (each tensor argument's shape with dim 0 = 0, its
// dtype and device; plain arguments as given; the target likewise), exactly as a replica without
// rows does (a forward, then a backward of zeros), so they meet every collective and add nothing to
// any sum; what their forward does to this rank's buffers is overwritten by join()'s final
// broadcast (and by the steps' broadcasts, broadcast_buffers). (PyTorch's DDP.join() does not
// shadow such modules.) ValueError on every rank, in the first step where some rank has joined,
// when a joined rank never trained a batch since construction (no shape to shadow with), and in
// deterministic mode, whose shard group needs a shard on every rank in every step.
//
// Collectives inside the module (dist::current_group(), current_group.h): the group spans every
// replica of every rank, and every replica runs each step, one without rows (fewer rows than
// local devices, a rank with an empty batch, a joined rank's shadow step) on 0 rows and one whose
// targets are all ignored backpropagating zeros, so each meets the others' collectives. forward()
// under no_grad or eval() exchanges nothing between ranks: in deterministic mode its group is
// then this rank's shards only.
//
// Errors: a collective that fails or waits longer than the process group's timeout throws
// DistError / TimeoutError (see dist/mpi.h); ValueError when ranks disagree on no_sync() in a
// step, or when a rank joined under a module that runs collectives that it cannot shadow (it never
// trained a batch, or deterministic mode; see "Uneven inputs").
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "lockstep/dist/process_group.h"
#include "lockstep/parallel/data_parallel.h"

namespace lockstep::parallel {

struct DistributedDataParallelOptions {
  /// This rank's local devices (empty: {cpu:0}); on GPUs exactly one, {cuda:local_rank}.
  std::vector<Device> device_ids;
  /// Bit-identical to one process with one device (see above).
  bool deterministic = false;
  /// Samples per shard in deterministic mode (the same on every rank).
  std::int64_t shard_size = 8;
  /// Bucket capacity (DDP's bucket_cap_mb; default 25 MB) and overlap with backward; `scatter`
  /// for ZeroRedundancyOptimizer (reduce-scatter instead of all-reduce: each rank's .grad then
  /// holds the sums of its ZeRO shard only; one device per rank, ValueError otherwise; no effect
  /// in deterministic mode, whose tree sum gives every rank the whole gradient).
  ReducerOptions reducer{};
  /// Seed of the dropout masks, keyed by (seed, step, row index in the global batch: the ranks'
  /// local batches concatenated in rank order), so they match one process on the global batch.
  /// The forward() path keys by the row index within the local batch.
  std::uint64_t seed = 0;
  /// Intra-op threads per local device; 0: max(1, usable cores / local devices).
  int threads_per_device = 0;
  /// PyTorch's broadcast_buffers: the module's buffers (BatchNorm's running statistics) of the
  /// lowest active rank (rank 0 unless it has joined) are broadcast to every rank at the start of
  /// training steps, gated as PyTorch gates it (see "Buffers" above). Off: each rank keeps its
  /// own buffers (construction and join() still broadcast them).
  bool broadcast_buffers = true;
};

/// How a global batch of `batch` samples is cut across `parts` ranks (or devices): sizes as
/// torch.tensor_split gives them (differ by at most one, larger first), or, with
/// shard_size > 0, runs of whole shards of shard_size samples split the same way over the
/// shards (deterministic mode). Returns (start, size) per part; parts may be empty.
/// ValueError for batch < 0, parts < 1 or shard_size < 0.
std::vector<std::pair<std::int64_t, std::int64_t>> split_batch(std::int64_t batch,
                                                               std::int64_t parts,
                                                               std::int64_t shard_size = 0);

/// Per-rows sums of an evaluation (e.g. {loss · rows, correct rows}) of a slice of the data.
using MetricSums = std::function<std::vector<double>(const Tensor& x, const Tensor& y)>;

/// Exact distributed evaluation: rank r evaluates rows split_batch(N, world)[r] of x [N, ...]
/// and y [N, ...] (tensor_split parts: every row exactly once, no padding, no duplicates; a rank
/// may get none and then does not call `sums`), and the sums are all-reduced in float64 (rank
/// order, identical on every rank). Returns the totals followed by the number of rows
/// evaluated (N). Every rank calls it with the same N and the same number of sums. Without a
/// group (null) it is `sums(x, y)` plus N. ShapeError when x and y disagree on N; ValueError
/// when ranks return different numbers of sums (DistError/ShapeError from the collective).
std::vector<double> evaluate_exact(dist::ProcessGroup* group, const Tensor& x, const Tensor& y,
                                   const MetricSums& sums, std::size_t num_sums);

class DistributedDataParallel : public DataParallel {
 public:
  /// Wraps `module` for the ranks of `process_group` (every rank constructs its own, in the same
  /// order as its other collectives). Broadcasts rank 0's parameters and buffers. ValueError for
  /// a null group; the errors of DataParallel's constructor (on CUDA devices: one device and an
  /// NCCL group on it made through a bootstrap group, see above); DistError/TimeoutError from
  /// the broadcast.
  DistributedDataParallel(std::shared_ptr<nn::Module> module,
                          std::shared_ptr<dist::ProcessGroup> process_group,
                          DistributedDataParallelOptions options = {});

  const std::shared_ptr<dist::ProcessGroup>& process_group() const {
    return options().process_group;
  }
  int rank() const { return process_group()->rank(); }
  int world_size() const { return process_group()->size(); }

  /// Call once on every rank after its last forward_backward() of a pass over uneven data (see
  /// above). Returns when every rank has joined; parameters and buffers are then bit-identical on
  /// all ranks. Under a module that runs collectives the shadow steps run this rank's replicas on
  /// 0 rows shaped like its last batch; ValueError on every rank when a joined rank never trained
  /// one, or in deterministic mode (see "Uneven inputs"); DistError/TimeoutError from a collective.
  void join();

  /// Each rank's share of the last forward_backward()'s loss (weighted by its count / the global
  /// count; they sum to the returned loss), indexed by rank.
  const std::vector<double>& rank_losses() const { return rank_losses_; }

  /// Broadcasts rank 0's buffers to every rank now (PyTorch's DDP._sync_buffers), e.g. before an
  /// evaluation that reads running statistics when broadcast_buffers is off, or after the last
  /// step. A collective: every rank calls it. Does nothing for a module without buffers.
  void sync_buffers() { broadcast_buffers_from(0); }

  std::string name() const override { return "DistributedDataParallel"; }
  /// ValueError: a DistributedDataParallel is built collectively by every rank, not cloned.
  std::shared_ptr<nn::Module> clone() const override;

 protected:
  GlobalStep begin_step(const LocalStep& mine) override;
  double end_step(double share) override;
  ShardRows gather_shards(ShardRows local, const GlobalStep& step) override;
  void reduce_gather_grads(Tensor& total, std::vector<char>& has) override;
  void before_forward() override;
  std::shared_ptr<dist::ProcessGroup> forward_shard_ranks(
      std::int64_t mine, std::vector<std::int64_t>& rank_shards) override;
  bool joined() const override { return joined_; }

 private:
  // Broadcasts the flat parameters and every buffer from `root` (construction; end of join).
  void broadcast_state(int root);
  // Every buffer from `root`, in one collective per dtype (int64 buffers travel exactly).
  void broadcast_buffers_from(int root);
  // Whether this training forward broadcasts buffers (PyTorch's will_sync_module_buffers), and
  // the flag's update after it: true after a synced training forward, false after one inside
  // no_sync() (PyTorch's require_forward_param_sync).
  bool buffer_sync_due() const;
  // join()'s shadow steps under a module that runs collectives (distributed_join.cpp): remembers
  // the 0-row version of a real step's batch (mine.inputs, mine.target); and the ValueError of a
  // step where ranks `joined` (comma-separated) cannot shadow such a module: in deterministic
  // mode, or when ranks `unshaped` (of those) never trained a batch.
  void remember_shadow(const LocalStep& mine);
  void check_shadowable(const std::string& joined, const std::string& unshaped) const;

  bool broadcast_buffers_ = true;
  bool forward_param_sync_ = true;
  // Whether this rank has joined, whether every rank has (the join loop ends), the lowest rank
  // still active in the last step any rank was, and each rank's weighted loss of the last step.
  bool joined_ = false;
  bool all_joined_ = false;
  int last_active_rank_ = 0;
  std::vector<double> rank_losses_;
  // The shadow batch (remember_shadow): the last trained batch's arguments and target with 0 rows
  // each; has_shadow_ once a batch was trained under a module that runs collectives.
  nn::Args shadow_inputs_;
  Tensor shadow_target_;
  bool has_shadow_ = false;
};

}  // namespace lockstep::parallel
