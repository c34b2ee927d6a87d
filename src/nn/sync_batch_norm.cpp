// nn::SyncBatchNorm, convert_sync_batchnorm, and BatchNormBase::forward_synchronized: the
// training forward of a synchronized BatchNorm and its backward, after PyTorch's
// torch/nn/modules/_functions.py (class SyncBatchNorm), on the pieces of
// lockstep/ops/batch_norm.h.
#include "lockstep/nn/sync_batch_norm.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/dist/process_group.h"
#include "lockstep/ops/batch_norm.h"
#include "lockstep/ops/ops.h"

namespace lockstep::nn {

SyncBatchNorm::SyncBatchNorm(std::int64_t num_features, double eps,
                             std::optional<double> momentum, bool affine, bool track_running_stats)
    : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {
  synchronized_ = true;
}

void SyncBatchNorm::check_input(const Tensor& input) const {
  if (!input.defined() || input.dim() < 2 || input.dim() > 4)
    throw ShapeError(describe() + ": expected 2D, 3D or 4D input (got " +
                     (input.defined() ? std::to_string(input.dim()) + "D input " +
                                            input.shape().str()
                                      : std::string("an undefined tensor")) +
                     ")");
}

std::shared_ptr<Module> SyncBatchNorm::clone() const {
  auto copy = std::make_shared<SyncBatchNorm>(num_features, eps, momentum, affine,
                                              track_running_stats);
  copy_module_state(*this, *copy);
  return copy;
}

namespace {
void convert(Module& m) {
  if (auto* bn = dynamic_cast<BatchNormBase*>(&m)) bn->set_synchronized(true);
  for (const auto& [name, child] : m.named_children())
    if (child) convert(*child);
}
}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module) {
  if (!module) throw ValueError("convert_sync_batchnorm: got a null module");
  convert(*module);
  return module;
}

Tensor BatchNormBase::forward_synchronized(const Tensor& input, dist::ProcessGroup& group,
                                           double factor) {
  const std::int64_t c = num_features;
  const auto f64 = input.options().dtype(kFloat64);
  Tensor row;
  {
    NoGradGuard no_grad;
    const double count = static_cast<double>(input.numel() / c);
    row = cat({batch_norm_stats(input).reshape({2 * c}), full({1}, count, f64)}, 0);
  }
  std::vector<Tensor> rows;
  for (int r = 0; r < group.size(); ++r) rows.push_back(zeros({1, 2 * c + 1}, f64));
  const Tensor mine = row.reshape({1, 2 * c + 1});
  group.all_gather(rows, mine);
  // Every member merges the same rows in the same order: the same statistics everywhere, and
  // the same error everywhere when the group holds one value per channel.
  const BatchNormGathered stats =
      batch_norm_gather_stats(cat(rows, 0), track_running_stats ? running_mean : Tensor(),
                              track_running_stats ? running_var : Tensor(), factor, eps);
  const Tensor mean_invstd = stats.mean_invstd.to(input.device());
  Tensor out = batch_norm_elemt(input, weight, bias, mean_invstd);
  if (!autograd::needs_grad({&input, &weight, &bias})) return out;
  const bool rx = input.requires_grad(), rw = weight.defined() && weight.requires_grad(),
             rb = bias.defined() && bias.requires_grad();
  dist::ProcessGroup* g = &group;  // spans the step, which the backward belongs to
  autograd::record(
      "SyncBatchNormBackward", out, {&input, &weight, &bias},
      [input, w = weight, mean_invstd, count = stats.count, g, rx, rw, rb, c](const Tensor& gy) {
        NoGradGuard no_grad;
        const Tensor sums = batch_norm_backward_reduce(gy, input, mean_invstd);
        Tensor gx, gw, gb;
        if (rw) gw = mul(narrow(sums, 0, 1, 1), narrow(mean_invstd, 0, 1, 1)).reshape({c}).to(
                    input.dtype());
        if (rb) gb = narrow(sums, 0, 0, 1).reshape({c}).to(input.dtype());
        if (rx) {
          // PyTorch all-reduces only when the input needs a gradient; every member decides
          // alike (the same model), so the collective lines up. An empty piece adds zeros.
          Tensor global = sums.clone();
          g->all_reduce(global, dist::ReduceOp::Sum);
          gx = count > 0 ? batch_norm_backward_elemt(gy, input, mean_invstd, w, global, count)
                         : zeros_like(input);
        }
        return std::vector<Tensor>{gx, gw, gb};
      });
  return out;
}

}  // namespace lockstep::nn
