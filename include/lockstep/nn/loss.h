// Loss modules (torch.nn.CrossEntropyLoss, torch.nn.MSELoss), reduction 'mean'.
#pragma once

#include "lockstep/ops/ops.h"

namespace lockstep::nn {

/// Mean cross-entropy over class indices: input logits [N, C] (float), target [N] (int64).
/// Numerically stable log-softmax. Targets equal to ignore_index (default −100, as PyTorch) are
/// skipped. IndexError naming the row for a target outside [0, C); ShapeError / DTypeError for
/// mismatched shapes or dtypes.
class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(std::int64_t ignore_index = -100) : ignore_index(ignore_index) {}
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return cross_entropy(input, target, ignore_index);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return forward(input, target);
  }
  std::int64_t ignore_index;
};

/// mean((input − target)²); input and target of the same shape (ShapeError otherwise).
class MSELoss {
 public:
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return mse_loss(input, target);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return forward(input, target);
  }
};

}  // namespace lockstep::nn
