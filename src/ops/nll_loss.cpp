// nll_loss and the losses' 'sum'/'none' reductions (lockstep/ops/loss.h).
#include <algorithm>
#include <limits>
#include <string>

#include "lockstep/ops/loss.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;

Reduction reduction_from(const std::string& s) {
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  if (s == "none") return Reduction::None;
  throw ValueError(s + " is not a valid value for reduction (expected 'none', 'mean' or 'sum')");
}

Tensor nll_loss(const Tensor& input, const Tensor& target, std::int64_t ignore_index,
                Reduction reduction) {
  detail::check_floating("nll_loss", input);
  detail::check_defined("nll_loss", target);
  detail::require_cpu("nll_loss", input);
  detail::require_cpu("nll_loss", target);
  if (input.dim() == 1 && target.dim() == 0)  // one sample: as [1, C] against [1]
    return nll_loss(input.reshape(Shape{1, input.size(0)}), target.reshape(Shape{1}),
                    ignore_index, reduction)
        .reshape(Shape{});
  if (input.dim() != 2)
    throw ShapeError("nll_loss: expected input [N, C] (or [C] with a 0-d target), got " +
                     input.shape().str());
  if (target.dtype() != kInt64)
    throw DTypeError("nll_loss: expected int64 class indices, got " + to_string(target.dtype()) +
                     " " + target.shape().str());
  if (target.dim() != 1 || target.size(0) != input.size(0))
    throw ShapeError("nll_loss: target " + target.shape().str() + " does not match input " +
                     input.shape().str() + " (expected [" + std::to_string(input.size(0)) + "])");
  const std::int64_t n = input.size(0), c = input.size(1);
  const std::int64_t* pt = target.data_ptr<std::int64_t>();
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (pt[i] == ignore_index) continue;
    if (pt[i] < 0 || pt[i] >= c)
      throw IndexError("nll_loss: Target " + std::to_string(pt[i]) + " is out of bounds (row " +
                       std::to_string(i) + ", " + std::to_string(c) + " classes)");
    ++count;
  }
  Tensor rows = empty(Shape{n}, input.options());
  double total = 0;
  detail::visit_float(input.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pi = input.data_ptr<T>();
    T* pr = rows.data_ptr<T>();
    for (std::int64_t i = 0; i < n; ++i) {
      pr[i] = pt[i] == ignore_index ? T(0) : -pi[i * c + pt[i]];
      total += static_cast<double>(pr[i]);
    }
  });
  Tensor out = reduction == Reduction::None ? rows
               : reduction == Reduction::Sum
                   ? scalar_tensor(total, input.options())
                   : scalar_tensor(count ? total / static_cast<double>(count)
                                         : std::numeric_limits<double>::quiet_NaN(),
                                   input.options());
  if (needs_grad({&input}))
    record("NllLossBackward", out, {&input},
           [target = target, shape = input.shape(), ignore_index, reduction, count](const Tensor& g) {
             Tensor gi = zeros(shape, g.options());
             const std::int64_t n = shape[0], c = shape[1];
             const std::int64_t* pt = target.data_ptr<std::int64_t>();
             const double scale = reduction == Reduction::Mean
                                      ? 1.0 / static_cast<double>(std::max<std::int64_t>(count, 1))
                                      : 1.0;
             detail::visit_float(g.dtype(), [&](auto zero) {
               using T = decltype(zero);
               const T* pg = g.data_ptr<T>();
               T* po = gi.data_ptr<T>();
               for (std::int64_t i = 0; i < n; ++i)
                 if (pt[i] != ignore_index)
                   po[i * c + pt[i]] =
                       static_cast<T>(-scale * static_cast<double>(pg[reduction == Reduction::None ? i : 0]));
             });
             return std::vector<Tensor>{gi};
           });
  return out;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                     Reduction reduction) {
  if (reduction == Reduction::Mean) return cross_entropy(logits, target, ignore_index);
  detail::check_floating("cross_entropy", logits);
  if (logits.dim() != 2)
    throw ShapeError("cross_entropy: expected logits [N, C], got " + logits.shape().str());
  return nll_loss(log_softmax(logits, 1), target, ignore_index, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (reduction == Reduction::Mean) return mse_loss(input, target);
  detail::check_same("mse_loss", input, target);
  detail::check_floating("mse_loss", input);
  if (input.shape() != target.shape())
    throw ShapeError("mse_loss: input " + input.shape().str() + " and target " +
                     target.shape().str() + " must have the same shape");
  const Tensor d = sub(input, target);
  const Tensor sq = mul(d, d);
  return reduction == Reduction::Sum ? sum(sq) : sq;
}

}  // namespace lockstep
