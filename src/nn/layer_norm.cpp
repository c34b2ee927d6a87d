// nn::LayerNorm: PyTorch's LayerNorm (torch/nn/modules/normalization.py) over
// lockstep::layer_norm.
#include "lockstep/nn/layer_norm.h"

#include "lockstep/ops/ops.h"

namespace lockstep::nn {

LayerNorm::LayerNorm(Shape normalized_shape_, double eps_, bool elementwise_affine_, bool bias_)
    : normalized_shape(normalized_shape_),
      eps(eps_),
      elementwise_affine(elementwise_affine_),
      has_bias(elementwise_affine_ && bias_) {
  if (normalized_shape.size() == 0)
    throw ValueError("LayerNorm: normalized_shape must have at least one dimension, got []");
  for (std::int64_t s : normalized_shape)
    if (s < 0)
      throw ValueError("LayerNorm: normalized_shape sizes must be non-negative, got " +
                       normalized_shape.str());
  reset();
}

void LayerNorm::reset() {
  if (!elementwise_affine) return;
  weight = register_parameter("weight", ones(normalized_shape));
  if (has_bias) bias = register_parameter("bias", zeros(normalized_shape));
}

Tensor LayerNorm::forward(const Tensor& input) {
  try {
    return layer_norm(input, normalized_shape, weight, bias, eps);
  } catch (const ShapeError& e) {
    throw ShapeError("LayerNorm(" + normalized_shape.str() + "): " + e.what());
  }
}

}  // namespace lockstep::nn
