// nn::LayerNorm (torch.nn.LayerNorm, torch/nn/modules/normalization.py).
#pragma once

#include "lockstep/nn/module.h"

namespace lockstep::nn {

class LayerNorm : public Cloneable<LayerNorm> {
 public:
  /// Normalizes over the trailing dimensions `normalized_shape` (PyTorch's LayerNorm(int) is
  /// the one-element shape). With elementwise_affine: parameter weight (normalized_shape, ones)
  /// and, when `bias` (torch >= 2.1's bias argument; nanoGPT's LayerNorm(ndim, bias)), parameter
  /// bias (normalized_shape, zeros); without elementwise_affine neither (and `bias` is ignored,
  /// as PyTorch). float32 parameters. ValueError for an empty normalized_shape or a negative size.
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  explicit LayerNorm(std::int64_t normalized_size, double eps = 1e-5,
                     bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}

  /// layer_norm(input, normalized_shape, weight, bias, eps) (lockstep/ops/layer_norm.h): input
  /// [*, normalized_shape] float32/float64 -> the same shape. ShapeError naming the layer when
  /// the trailing sizes differ.
  Tensor forward(const Tensor& input) override;
  void reset() override;
  std::string name() const override { return "LayerNorm"; }

  Shape normalized_shape;
  double eps;
  bool elementwise_affine, has_bias;
  Tensor weight, bias;
};

}  // namespace lockstep::nn
