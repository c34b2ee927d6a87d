// nn::Conv2d: 2-d convolution over NCHW images (torch.nn.Conv2d, padding_mode 'zeros').
#pragma once

#include "lockstep/nn/module.h"
#include "lockstep/ops/conv.h"

namespace lockstep::nn {

class Conv2d : public Cloneable<Conv2d> {
 public:
  /// weight [out_channels, in_channels / groups, kH, kW] from kaiming_uniform_(a = √5) and bias
  /// [out_channels] from U(−1/√fan_in, 1/√fan_in), fan_in = in_channels / groups · kH · kW, as
  /// torch.nn.Conv2d's reset_parameters (torch/nn/modules/conv.py). ValueError naming the
  /// arguments for channels or kernel < 1, stride or dilation < 1, padding < 0, groups < 1 or
  /// not dividing both channel counts.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size,
         Size2 stride = {1, 1}, Size2 padding = {0, 0}, Size2 dilation = {1, 1},
         std::int64_t groups = 1, bool bias = true);
  /// A square kernel, stride, padding (torch.nn.Conv2d(in, out, 3, padding=1)).
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         std::int64_t stride = 1, std::int64_t padding = 0)
      : Conv2d(in_channels, out_channels, {kernel_size, kernel_size}, {stride, stride},
               {padding, padding}) {}

  /// input [N, in_channels, H, W] float32/float64 -> [N, out_channels, H_out, W_out]
  /// (lockstep::conv2d, whose ShapeErrors this rethrows with the layer named).
  Tensor forward(const Tensor& input) override;
  void reset() override;
  std::string name() const override { return "Conv2d"; }

  std::int64_t in_channels, out_channels;
  Size2 kernel_size, stride, padding, dilation;
  std::int64_t groups;
  bool has_bias;
  Tensor weight, bias;
};

}  // namespace lockstep::nn
