// GradientReducer: sums one rank's parameter gradients with the other ranks' over a ProcessGroup
// (the mechanism of torch.nn.parallel.DistributedDataParallel's reducer). The rank's parameters
// live in one flat buffer and its gradients in another; gradients are grouped into buckets of at
// most `bucket_cap_bytes` in reverse parameter order (the order backward produces them).
//
// Overlap (ReducerOptions::overlap, PyTorch's behaviour): each bucket except the last is STARTED
// as soon as all of its gradients are final, from the gradient hook on the thread running backward
// (ProcessGroup::all_reduce_async / reduce_async, keeping the Work), and the rest of backward runs
// while it travels; finalize() / abandon() start the rest and wait for every started reduction, in
// bucket order, before the flags are read or .grad is handed out: the wait is just before the
// optimizer step. The last bucket (the first parameters, whose
// gradients backward produces last) is started by finalize(), since its reduction also counts the
// ranks that completed their backward. Whether the reduction really runs during backward is the
// backend's (process_group.h: threads and mpi on a communication thread, nccl on its stream; the
// base class's defaults run it at once, blocking). Overlap off: every bucket is started by
// finalize(). Under CUDA graph capture the reductions are the blocking calls (nothing is left
// pending across the capture). The bits are the same either way: the same collectives on the same
// ranges in the same order. Buckets are started strictly in index order on every rank, so ranks
// whose graphs differ (unused parameters) still issue the same collectives. The caller scales each
// rank's loss by b_k / B, so the sum is the gradient of the mean loss over the global batch.
//
// Compression (ReducerOptions::compression = dist::WireFormat::BFloat16; PyTorch's
// ddp_model.register_comm_hook(None, bf16_compress_hook) from
// torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py): every gradient bucket is reduced
// with the bfloat16 wire format (process_group.h: each rank's values rounded to bfloat16, summed
// in float32 in rank order, the sum rounded to bfloat16 and widened back; under
// DistributedDataParallel with several local devices the rounded values are each rank's local
// float32 sum, hybrid_group.h), so the gradients move two bytes per element and bytes_reduced()
// counts two. PyTorch's hook divides by the world size
// before its all-reduce; here the losses are already weighted (b_k / B), so nothing is divided.
// The has-grad and completion flags are never compressed: they travel natively, in a collective
// of their own, so they stay exact. Float32 gradients only. DataParallel and
// DistributedDataParallel refuse it in deterministic mode.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "lockstep/dist/process_group.h"
#include "lockstep/parallel/flat_buffer.h"

namespace lockstep::parallel {

struct ReducerOptions {
  /// Bucket capacity in bytes (DDP's bucket_cap_mb, default 25 MB).
  std::int64_t bucket_cap_bytes = 25 * 1024 * 1024;
  /// Start each bucket's reduction during backward, as soon as it is ready (true), or every
  /// bucket's after it (false); the results are bit-identical (see above).
  bool overlap = true;
  /// How gradient buckets travel: Native (float32 as they are) or BFloat16 (PyTorch's
  /// bf16_compress_hook, see above; float32 gradients only).
  dist::WireFormat compression = dist::WireFormat::Native;
  /// ZeRO-1's reduction (ZeroRedundancyOptimizer, zero_redundancy_optimizer.h): each bucket of m
  /// elements is reduce-scattered (ProcessGroup::reduce_scatter_async) instead of reduced: the
  /// bucket is cut into size() chunks of ⌈m/size()⌉ elements (the last ones short or empty,
  /// padded with zeros on the wire) and after finalize() member r's flat_grad() holds the sum
  /// only in chunk r of every bucket — the elements of its ZeRO shard; elsewhere it holds
  /// unspecified values (.grad too: a step must read only the shard, and
  /// ZeroRedundancyOptimizer::clip_grad_norm_, not nn::utils::clip_grad_norm_, clips such
  /// gradients). Each element's sum is the same rank-order fold as the all-reduce's, so the
  /// shard's bits are the same, and a rank moves the same gradient bytes as a reduce but receives
  /// 1/size() of the sums. The has-grad and completion flags are all-reduced in a collective of
  /// their own (has_grad() valid on every member). ValueError with compression.
  bool scatter = false;
};

class GradientReducer {
 public:
  /// `flat`: this rank's parameters, already in a flat buffer. Registers a post-accumulate-grad
  /// hook on each parameter that requires grad. `root` < 0: after finalize() every rank's
  /// flat_grad() holds the sum (each bucket is all_reduce'd); `root` = r >= 0: only rank r's does
  /// (ProcessGroup::reduce, which moves less: DataParallel reads replica 0's result only) and the
  /// other ranks' flat_grad() and has_grad() are unspecified. ValueError for a null group, a
  /// non-positive bucket cap or root >= group->size(); DTypeError for BFloat16 compression of
  /// gradients that are not float32.
  GradientReducer(const FlatBuffer& flat, std::shared_ptr<dist::ProcessGroup> group,
                  ReducerOptions options = {}, int root = -1);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before a backward: sets every parameter's .grad to none and marks every bucket pending. The
  /// buffer is not zeroed: the hook copies each parameter's first gradient of the step into its
  /// slice (and points .grad at the slice, so a further backward in the same step adds there),
  /// and a slice that got nothing is zeroed just before its bucket is reduced. Saves a zeroing
  /// pass and a read per step over the whole buffer compared with adding into a zeroed one.
  void prepare();
  /// After prepare(), before backward: parameter i's slice starts from `grad` (shaped like the
  /// parameter, on its device) instead of zero; backward's gradient is added to it. Used for
  /// DataParallel::no_sync()'s pending gradients. Does not count as a gradient for has_grad().
  void seed(std::size_t i, const Tensor& grad);
  /// After the backward (also on a rank that had no samples this step, which contributes zeros):
  /// reduces the buckets not reduced yet, in order. Which parameters received a gradient on any
  /// rank is agreed in the same collectives: one 0/1 flag per parameter rides in front of the
  /// last bucket (summed; > 0 means some rank had one), so no separate collective is needed. A
  /// parameter that got none on any rank is left with no .grad; one that got a gradient on some
  /// ranks only is reduced with zeros from the others; every other parameter's .grad is its
  /// slice of flat_grad(). The flags also sum one completion flag per rank (1 from finalize(), 0
  /// from abandon()): completed_ranks(). Waits for every reduction started during backward (in
  /// bucket order); when one of them (or one started here) failed, waits for all the others
  /// too, so none is left pending, then rethrows the first error (DistError, TimeoutError, ...).
  void finalize();
  /// finalize() for a rank whose backward failed: it still takes part in every remaining
  /// collective (contributing zeros for the gradients it did not produce), so the other ranks
  /// finish their step, but counts as not completed.
  void abandon();
  /// For a rank whose backward failed and which has aborted its group instead of abandon()ing
  /// (DataParallel under a module that runs collectives): waits for the reductions it started
  /// during backward, ignoring their errors (an aborted group fails them), and starts nothing.
  /// Called before the group's abort is cleared, so no started collective outlives it. Also
  /// what prepare() and the destructor do with reductions a failed step left behind.
  void discard();

  /// Gives the reducer a new, zeroed gradient buffer (before prepare()); tensors viewing the old
  /// one keep their values. DataParallel calls it when a .grad it handed out from the old buffer
  /// is still held by someone.
  void renew_buffer();
  /// The reduced gradients after finalize(), laid out as the flat parameter buffer.
  const Tensor& flat_grad() const { return grad_view_; }
  /// Whether parameter i has a gradient after finalize().
  bool has_grad(std::size_t i) const { return has_grad_[i] != 0; }
  /// After finalize(): how many ranks completed their backward (called finalize(), not
  /// abandon()); valid where has_grad() is (the root, or every rank with root < 0 or scatter).
  int completed_ranks() const { return completed_ranks_; }

  std::size_t num_buckets() const { return buckets_.size(); }
  /// Bucket b's element range [lo, hi) of the flat buffer (buckets tile it; bucket 0 holds the
  /// last parameters). ZeroRedundancyOptimizer partitions by them. std::out_of_range for
  /// b >= num_buckets().
  std::pair<std::int64_t, std::int64_t> bucket_range(std::size_t b) const {
    return {buckets_.at(b).lo, buckets_.at(b).hi};
  }
  /// Bytes this rank contributed to reductions in the last step, as they travel (gradients at
  /// ProcessGroup::wire_bytes per element: 2 with BFloat16 compression; flags at their own
  /// element size; 0 in a group of one rank).
  std::int64_t bytes_reduced() const { return bytes_reduced_; }

 private:
  struct Bucket {
    std::int64_t lo = 0, hi = 0;      // element range of the flat buffer
    std::vector<std::size_t> params;  // the parameters in it that require grad
    std::size_t pending = 0;          // of those, how many have no gradient yet this step
  };
  // A reduction started and not waited for yet, with the tensor it reduces (kept alive and
  // untouched until its wait, as ProcessGroup's *_async require).
  struct Pending {
    std::shared_ptr<dist::Work> work;
    Tensor slice;
    // A reduce-scatter (options_.scatter): its inputs, and where in the buffer this member's
    // chunk of `slice` (the output) goes once it has arrived (the chunk may be short).
    std::vector<Tensor> inputs;
    Tensor chunk;
  };
  void mark_ready(std::size_t param);
  void start_ready_buckets();
  void reduce_rest();  // finalize() / abandon() after completed_ is set
  // Starts bucket b's reduction (appended to pending_).
  void reduce_bucket(std::size_t b);
  // Starts the reduction of elements [lo, hi) of grad_ in `wire` format (blocking under CUDA
  // graph capture); counts its bytes.
  void start(std::int64_t lo, std::int64_t hi, dist::WireFormat wire);
  // Starts the reduce-scatter of bucket elements [lo, hi) of the flat buffer (options_.scatter).
  void start_scatter(std::int64_t lo, std::int64_t hi);
  // Whether the flags ride in front of the last bucket (no compression, no scatter) rather than
  // in a collective of their own.
  bool flags_ride() const;
  void wait_pending();  // in order; all of them, then rethrows the first error
  void write_flags();
  void read_flags();

  FlatBuffer flat_;
  std::shared_ptr<dist::ProcessGroup> group_;
  ReducerOptions options_;
  int root_ = -1;
  // [pad_ + numel]: elements [0, nparams) are the has-grad flags of the last bucket's reduction,
  // element nparams the completion flag, then padding to a 64-byte boundary, then the gradients
  // (grad_view_).
  Tensor grad_;
  Tensor grad_view_;
  std::int64_t pad_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter -> bucket (-1: no grad required)
  std::vector<std::int64_t> has_grad_;
  std::vector<char> written_;  // the slice holds this step's data (copied, seeded)
  std::vector<int> hook_ids_;
  std::vector<Pending> pending_;                     // in start order (bucket order)
  std::vector<std::shared_ptr<dist::Work>> waited_;  // this step's, waited for (wait_pending)
  std::size_t next_bucket_ = 0;
  bool active_ = false;     // between prepare() and finalize(): hooks only count then
  bool completed_ = false;  // this rank's completion flag (finalize: 1, abandon: 0)
  int completed_ranks_ = 0;
  std::int64_t bytes_reduced_ = 0;
};

}  // namespace lockstep::parallel
