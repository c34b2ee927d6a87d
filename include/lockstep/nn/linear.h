// nn::Linear: y = x Wᵀ + b (torch.nn.Linear).
#pragma once

#include "lockstep/nn/module.h"

namespace lockstep::nn {

class Linear : public Cloneable<Linear> {
 public:
  /// weight [out_features, in_features] and bias [out_features], both drawn from
  /// U(−1/√in_features, 1/√in_features) as PyTorch's reset_parameters (bias omitted when !bias).
  /// ValueError for negative sizes.
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);

  /// input [..., in_features] float32/float64 -> [..., out_features]. ShapeError when the last
  /// dimension is not in_features.
  Tensor forward(const Tensor& input) override;
  void reset() override;
  std::string name() const override { return "Linear"; }

  std::int64_t in_features, out_features;
  bool has_bias;
  Tensor weight, bias;
};

}  // namespace lockstep::nn
