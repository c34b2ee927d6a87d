// nn::BatchNorm1d / BatchNorm2d: PyTorch's _BatchNorm (torch/nn/modules/batchnorm.py) over
// lockstep::batch_norm.
#include "lockstep/nn/batch_norm.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/dist/current_group.h"
#include "lockstep/ops/ops.h"

namespace lockstep::nn {

BatchNormBase::BatchNormBase(std::int64_t num_features_, double eps_,
                             std::optional<double> momentum_, bool affine_,
                             bool track_running_stats_)
    : num_features(num_features_),
      eps(eps_),
      momentum(momentum_),
      affine(affine_),
      track_running_stats(track_running_stats_) {
  if (num_features < 1)
    throw ValueError("BatchNorm: num_features must be positive, got " +
                     std::to_string(num_features));
  if (!(eps > 0)) throw ValueError("BatchNorm: eps must be positive, got " + std::to_string(eps));
  if (momentum && !(*momentum >= 0 && *momentum <= 1))
    throw ValueError("BatchNorm: momentum must be in [0, 1] (or None for a cumulative average), "
                     "got " +
                     std::to_string(*momentum));
  reset_state();
}

void BatchNormBase::reset_state() {
  if (affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

std::string BatchNormBase::describe() const {
  return name() + "(" + std::to_string(num_features) + ")";
}

Tensor BatchNormBase::forward(const Tensor& input) {
  check_input(input);
  if (input.size(1) != num_features)
    throw ShapeError(describe() + ": expected input with " + std::to_string(num_features) +
                     " channels (dim 1), got " + input.shape().str());
  const bool update = is_training() && track_running_stats;
  // PyTorch increments num_batches_tracked before the op; the factor of a cumulative average
  // counts this batch. Here the counter moves only once the op has succeeded (a failed forward
  // changes nothing).
  double factor = momentum.value_or(0.0);
  if (update && !momentum) {
    const double n = static_cast<double>(num_batches_tracked.item()) + 1;
    factor = 1.0 / n;
  }
  // Batch statistics in training, and in eval when there are no running statistics.
  const bool batch_stats = is_training() || !track_running_stats;
  // SyncBatchNorm: in training, over the group of the replicas when there is more than one
  // (PyTorch's need_sync; without a group, or alone in it, it is plain BatchNorm).
  dist::ProcessGroup* group = synchronized_ && is_training() ? dist::current_group() : nullptr;
  Tensor out;
  try {
    if (group && group->size() > 1)
      out = forward_synchronized(input, *group, factor);
    else
      out = batch_norm(input, track_running_stats ? running_mean : Tensor(),
                       track_running_stats ? running_var : Tensor(), weight, bias, batch_stats,
                       factor, eps);
  } catch (const ValueError& e) {
    throw ValueError(describe() + ": " + e.what());
  } catch (const ShapeError& e) {
    throw ShapeError(describe() + ": " + e.what());
  }
  if (update) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(scalar_tensor(1, num_batches_tracked.options()));
  }
  return out;
}

void BatchNorm1d::check_input(const Tensor& input) const {
  if (!input.defined() || (input.dim() != 2 && input.dim() != 3))
    throw ShapeError(describe() + ": expected 2D or 3D input (got " +
                     (input.defined() ? std::to_string(input.dim()) + "D input " +
                                            input.shape().str()
                                      : std::string("an undefined tensor")) +
                     ")");
}

void BatchNorm2d::check_input(const Tensor& input) const {
  if (!input.defined() || input.dim() != 4)
    throw ShapeError(describe() + ": expected 4D input (got " +
                     (input.defined() ? std::to_string(input.dim()) + "D input " +
                                            input.shape().str()
                                      : std::string("an undefined tensor")) +
                     ")");
}

void BatchNormBase::copy_settings_from(const Module& src) {
  if (const auto* b = dynamic_cast<const BatchNormBase*>(&src)) synchronized_ = b->synchronized_;
}

namespace {
template <class BN>
std::shared_ptr<Module> clone_batch_norm(const BN& self) {
  auto copy = std::make_shared<BN>(self.num_features, self.eps, self.momentum, self.affine,
                                   self.track_running_stats);
  copy_module_state(self, *copy);  // the SyncBatchNorm switch too (copy_settings_from)
  return copy;
}
}  // namespace

std::shared_ptr<Module> BatchNorm1d::clone() const { return clone_batch_norm(*this); }
std::shared_ptr<Module> BatchNorm2d::clone() const { return clone_batch_norm(*this); }

}  // namespace lockstep::nn
