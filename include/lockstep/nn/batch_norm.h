// nn::BatchNorm1d and nn::BatchNorm2d (torch.nn.BatchNorm1d / BatchNorm2d,
// torch/nn/modules/batchnorm.py).
//
// Data-parallel semantics (PyTorch's, by design): under DataParallel and DistributedDataParallel
// each replica normalizes its own chunk with that chunk's statistics, so a model with BatchNorm
// trains differently on 1 and N devices; the running statistics that survive a step are device
// 0's (DataParallel keeps replica 0's buffers, which are the module's own) and, under DDP with
// broadcast_buffers, rank 0's. Deterministic mode, which promises the same bits for every device
// count, refuses a BatchNorm in training (ValueError naming the layer): SyncBatchNorm
// (nn/sync_batch_norm.h), which normalizes with the statistics of the whole global batch, is the
// fix; convert_sync_batchnorm() turns every BatchNorm of a model into one.
#pragma once

#include <optional>

#include "lockstep/nn/module.h"

namespace lockstep::dist {
class ProcessGroup;
}

namespace lockstep::nn {

/// What BatchNorm1d and BatchNorm2d share: PyTorch's _BatchNorm.
class BatchNormBase : public Module {
 public:
  /// weight [C] = 1 and bias [C] = 0 (when affine); buffers running_mean [C] = 0,
  /// running_var [C] = 1 and num_batches_tracked (0-d int64) = 0 (when track_running_stats).
  /// momentum: the running statistics' update factor; std::nullopt is PyTorch's None, a
  /// cumulative average (factor 1 / num_batches_tracked). ValueError for num_features < 1,
  /// eps <= 0 or a momentum outside [0, 1].
  BatchNormBase(std::int64_t num_features, double eps, std::optional<double> momentum,
                bool affine, bool track_running_stats);

  /// PyTorch's _BatchNorm.forward: in training the batch statistics normalize and, with
  /// track_running_stats, update the running ones (num_batches_tracked += 1 first, so the
  /// cumulative factor counts this batch); in eval the running statistics normalize (the batch
  /// statistics when track_running_stats is off). ShapeError naming the layer for an input of
  /// the wrong rank (check_input) or channel count; ValueError naming it for one value per
  /// channel in training. Nothing is updated when it throws.
  Tensor forward(const Tensor& input) override;
  /// Whether the output of a sample depends on the other samples of the batch: in training, or
  /// without running statistics (deterministic mode refuses such a module, see above).
  bool uses_batch_statistics() const override { return is_training() || !track_running_stats; }
  /// Whether the layer synchronizes its training statistics over the replicas' group
  /// (SyncBatchNorm, or a BatchNorm after convert_sync_batchnorm): its forward and backward then
  /// run collectives on dist::current_group() (nn/sync_batch_norm.h).
  bool runs_collectives() const override { return synchronized_; }
  bool synchronized() const { return synchronized_; }
  /// Turns the synchronization on or off in place (convert_sync_batchnorm() calls it on every
  /// BatchNorm of a model; clone() keeps it). Change it before wrapping the model, as PyTorch's
  /// docs ask of convert_sync_batchnorm: replicas are clones made at construction.
  void set_synchronized(bool on) { synchronized_ = on; }
  /// Copies the SyncBatchNorm switch from `src` when it is a BatchNorm too.
  void copy_settings_from(const Module& src) override;

  std::int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  void reset_state();
  /// ShapeError unless the input's rank suits the layer ("expected 4D input (got 3D input)").
  virtual void check_input(const Tensor& input) const = 0;
  std::string describe() const;
  /// The training forward over the statistics of every member of `group` (size > 1):
  /// src/nn/sync_batch_norm.cpp. `factor` is the running statistics' update factor.
  Tensor forward_synchronized(const Tensor& input, dist::ProcessGroup& group, double factor);

  bool synchronized_ = false;
};

/// Over [N, C] or [N, C, L] inputs.
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(std::int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return synchronized_ ? "SyncBatchNorm" : "BatchNorm1d"; }
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input(const Tensor& input) const override;
};

/// Over [N, C, H, W] inputs.
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}
  std::string name() const override { return synchronized_ ? "SyncBatchNorm" : "BatchNorm2d"; }
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input(const Tensor& input) const override;
};

}  // namespace lockstep::nn
