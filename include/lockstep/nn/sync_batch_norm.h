// nn::SyncBatchNorm and nn::convert_sync_batchnorm (torch.nn.SyncBatchNorm,
// torch/nn/modules/batchnorm.py; its autograd function torch/nn/modules/_functions.py).
//
// In training, inside DataParallel or DistributedDataParallel, the layer normalizes with the
// statistics of the whole global batch rather than of its replica's chunk, so 1 and N devices
// (or ranks, or ranks × devices) train the same model, to rounding:
//   forward   every replica computes its chunk's per-channel (mean, biased var, count) in
//             double; the rows are all-gathered over dist::current_group(); rows with count 0
//             are dropped and the rest merged count-weighted in member order (Chan's pairwise
//             update, lockstep::batch_norm_gather_stats); the output is normalized with the
//             global mean and the biased global variance; running_var moves toward the unbiased
//             variance of the global count. Every member computes the same statistics, so every
//             replica's running statistics agree.
//   backward  Σdy and Σdy·(x − mean) of the chunk are all-reduced (sum) when the input needs a
//             gradient, and dx uses the global sums and count; the weight and bias gradients
//             stay local and go through the gradient reducer with the other parameters, as in
//             PyTorch (their sum over replicas is the whole batch's gradient).
// Outside training, outside a wrapper (no current group) or in a group of one it is plain
// BatchNorm (PyTorch's need_sync). Differences from PyTorch, on purpose: it runs on CPU devices
// too (PyTorch's is GPU-only) and inside DataParallel (PyTorch's DataParallel has none); the
// variance travels as itself, not as invstd (one rounding fewer); the group is always the
// wrapper's (no process_group argument: every replica of a wrapper is in it); a step whose
// pieces are all empty leaves running_mean / running_var unchanged (PyTorch decays them toward
// NaN there, pytorch/pytorch#36530; num_batches_tracked still counts the step, as PyTorch's);
// one value per channel over the whole group is PyTorch's ValueError "Expected more than 1 value
// per channel when training", thrown on every member (PyTorch gives NaN there). The statistics
// are float64 whatever the input, so bf16 autocast (which leaves batch norm in float32) does
// not touch them.
// Data parallelism: the layer declares runs_collectives(), so every replica runs every step (one
// without rows on 0 rows), no_sync() does not turn the collectives off, DDP's join() shadows
// them (distributed.h), and deterministic mode runs the step's shards at once with the shard
// group as the group (member s = shard s): the rows are merged and the sums added in shard
// order, so the result is bit-identical for every device and rank count (docs/design.md).
#pragma once

#include <memory>

#include "lockstep/nn/batch_norm.h"

namespace lockstep::nn {

/// Over [N, C], [N, C, L] or [N, C, H, W] inputs (ShapeError naming the layer otherwise), with
/// BatchNormBase's parameters, buffers, defaults and errors (state_dict keys as PyTorch's).
class SyncBatchNorm : public BatchNormBase {
 public:
  explicit SyncBatchNorm(std::int64_t num_features, double eps = 1e-5,
                         std::optional<double> momentum = 0.1, bool affine = true,
                         bool track_running_stats = true);
  std::string name() const override { return "SyncBatchNorm"; }
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input(const Tensor& input) const override;
};

/// torch.nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm1d / BatchNorm2d in `module`'s
/// tree (the module itself included) synchronizes from now on (BatchNormBase::set_synchronized,
/// in place: parameters, buffers, state_dict keys and the pointers a model holds to its layers
/// stay as they are; PyTorch builds new modules sharing the tensors, which C++ members could not
/// follow). Returns `module`. Call it before wrapping the model in DataParallel or
/// DistributedDataParallel. ValueError for a null module.
std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module);

}  // namespace lockstep::nn
