// 2-d convolution (torch.nn.functional.conv2d), NCHW, float32 and float64, differentiable in the
// input, the weight and the bias.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "lockstep/core/tensor.h"

namespace lockstep {

/// A (height, width) pair of kernel sizes, strides, paddings or dilations.
using Size2 = std::array<std::int64_t, 2>;

/// "(h, w)", as PyTorch prints a pair, for messages.
inline std::string to_string(Size2 s) {
  std::string out = "(";
  out += std::to_string(s[0]);
  out += ", ";
  out += std::to_string(s[1]);
  out += ")";
  return out;
}

/// torch.nn.functional.conv2d: x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias
/// [C_out] or undefined -> [N, C_out, H_out, W_out], with
///   H_out = floor((H + 2·padding[0] − dilation[0]·(kH − 1) − 1) / stride[0]) + 1 (W alike),
/// out[n, o, i, j] = bias[o] + Σ_{c, p, q} x[n, g·C_in/groups + c, i·s0 − p0 + p·d0,
/// j·s1 − p1 + q·d1] · weight[o, c, p, q] for o in group g, zero outside the image (PyTorch's
/// zero padding). Same dtype (float32/float64) and device for all three. Semantics and output
/// size: torch/nn/functional.py conv2d, aten/src/ATen/native/Convolution.cpp (PyTorch's
/// padding='same'/'valid' strings and padding_mode are not offered: give the numbers).
/// N = 0 is allowed: the output is [0, C_out, H_out, W_out] and the weight and bias gradients
/// are zero. Autocast does not apply (conv2d computes in the inputs' dtype).
/// Gradients: x, weight and bias, each when it requires grad (one autograd node,
/// "ConvolutionBackward"). On the CPU: im2col + GEMM (KernelMode::Fast; bits independent of the
/// intra-op thread count) or plain loops (KernelMode::Reference); on cuda:k tensors: cuDNN with
/// fixed deterministic algorithms and no TF32 (src/ops/cuda/conv.cpp).
/// Errors: ShapeError naming the shapes for x not 4-d, weight not 4-d, an empty kernel (kH or
/// kW = 0), C_in ≠ weight's channels · groups, C_out not divisible by groups, a bias not
/// [C_out], or a (dilated) kernel larger than the padded input; ValueError for stride or
/// dilation < 1, padding < 0, groups < 1, an undefined x or weight; DTypeError for a non-float
/// input or mixed dtypes; DeviceError for mixed devices (and, on a GPU, for C_in = 0).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Size2 stride = {1, 1}, Size2 padding = {0, 0}, Size2 dilation = {1, 1},
              std::int64_t groups = 1);

}  // namespace lockstep
