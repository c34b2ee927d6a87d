// GradientReducer: sums one rank's parameter gradients with the other ranks' over a ProcessGroup
// (the mechanism of torch.nn.parallel.DistributedDataParallel's reducer). The rank's parameters
// live in one flat buffer and its gradients in another; gradients are grouped into buckets of at
// most `bucket_cap_bytes` in reverse parameter order (the order backward produces them) and each
// bucket is all-reduced as soon as all of its gradients are final, from the gradient hook on
// the thread running backward. The all-reduce is a blocking call there: the rest of this
// replica's backward waits for it (other replicas and ranks keep computing). PyTorch hands ready
// buckets to a communication thread instead; an asynchronous ProcessGroup call would be needed
// for that, and is not built. Buckets are reduced strictly in index order on every rank, so ranks
// whose graphs differ (unused parameters) still issue the same collectives. The caller scales each
// rank's loss by b_k / B, so the sum is the gradient of the mean loss over the global batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/dist/process_group.h"
#include "lockstep/parallel/flat_buffer.h"

namespace lockstep::parallel {

struct ReducerOptions {
  /// Bucket capacity in bytes (DDP's bucket_cap_mb, default 25 MB).
  std::int64_t bucket_cap_bytes = 25 * 1024 * 1024;
  /// All-reduce buckets during backward (true) or all of them after it (false).
  bool overlap = true;
};

class GradientReducer {
 public:
  /// `flat`: this rank's parameters, already in a flat buffer. Registers a post-accumulate-grad
  /// hook on each parameter that requires grad.
  GradientReducer(const FlatBuffer& flat, std::shared_ptr<dist::ProcessGroup> group,
                  ReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before a backward: zeroes the flat gradient buffer, points every parameter's .grad at its
  /// slice and marks every bucket pending.
  void prepare();
  /// After the backward (also on a rank that had no samples this step, which contributes zeros):
  /// reduces the buckets not reduced yet, in order, then agrees across ranks on which parameters
  /// received a gradient anywhere. A parameter that got none on any rank is left with no .grad;
  /// one that got a gradient on some ranks only is reduced with zeros from the others.
  void finalize();

  /// The reduced gradients after finalize(), laid out as the flat parameter buffer.
  const Tensor& flat_grad() const { return grad_; }
  /// Whether parameter i has a gradient after finalize().
  bool has_grad(std::size_t i) const { return has_grad_[i] != 0; }
  std::size_t num_buckets() const { return buckets_.size(); }
  /// Bytes this rank contributed to all-reduces in the last step.
  std::int64_t bytes_reduced() const { return bytes_reduced_; }

 private:
  struct Bucket {
    std::int64_t lo = 0, hi = 0;  // element range of the flat buffer
    int pending_init = 0;
    int pending = 0;
  };
  void mark_ready(std::size_t param);
  void reduce_ready_buckets();
  void reduce_bucket(std::size_t b);

  FlatBuffer flat_;
  std::shared_ptr<dist::ProcessGroup> group_;
  ReducerOptions options_;
  Tensor grad_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter -> bucket (-1: no grad required)
  std::vector<std::int64_t> has_grad_;
  std::vector<int> hook_ids_;
  std::size_t next_bucket_ = 0;
  bool active_ = false;  // between prepare() and finalize(): hooks only count then
  std::int64_t bytes_reduced_ = 0;
};

}  // namespace lockstep::parallel
