// conv2d (lockstep/ops/conv.h): checks, the device branch (kernels::dispatch on the CPU,
// cuDNN through cuda_conv_ops on a GPU) and the backward, recorded as one autograd node like
// linear's (src/ops/linalg.cpp). Semantics: torch.nn.functional.conv2d
// (aten/src/ATen/native/Convolution.cpp: check_shape_forward's messages, conv_output_size).
#include "lockstep/ops/conv.h"

#include <string>

#include "ops/conv_kernels.h"
#include "ops/cuda_conv_ops.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;
using kernels::Conv2dGeom;

namespace {

// The geometry of a call, after every check of the header's docstring.
Conv2dGeom check_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride,
                        Size2 padding, Size2 dilation, std::int64_t groups) {
  detail::check_same("conv2d", x, weight);
  detail::check_floating("conv2d", x);
  if (x.dim() != 4)
    throw ShapeError("conv2d: expected a 4-d input [N, C_in, H, W], got " + x.shape().str() +
                     (x.dim() == 3 ? " (a single image [C, H, W]: add the batch dimension with "
                                     "reshape to [1, C, H, W])"
                                   : ""));
  if (weight.dim() != 4)
    throw ShapeError("conv2d: expected a 4-d weight [C_out, C_in / groups, kH, kW], got " +
                     weight.shape().str());
  for (int i = 0; i < 2; ++i) {
    if (stride[i] < 1)
      throw ValueError("conv2d: stride must be at least 1, got " + to_string(stride));
    if (dilation[i] < 1)
      throw ValueError("conv2d: dilation must be at least 1, got " + to_string(dilation));
    if (padding[i] < 0)
      throw ValueError("conv2d: padding must be non-negative, got " + to_string(padding));
    // Bounds that keep the padded and dilated sizes far from overflowing int64 (and within
    // cuDNN's int).
    constexpr std::int64_t kMax = 2147483647;
    if (stride[i] > kMax || dilation[i] > kMax || padding[i] > kMax)
      throw ValueError("conv2d: stride " + to_string(stride) + ", padding " + to_string(padding) +
                       " and dilation " + to_string(dilation) + " must each be at most " +
                       std::to_string(kMax));
  }
  if (groups < 1)
    throw ValueError("conv2d: groups must be at least 1, got " + std::to_string(groups));
  if (weight.size(2) < 1 || weight.size(3) < 1)
    throw ShapeError("conv2d: weight " + weight.shape().str() +
                     " has an empty kernel (expected kH, kW >= 1)");
  const std::int64_t c_out = weight.size(0);
  if (c_out % groups != 0)
    throw ShapeError("conv2d: weight " + weight.shape().str() +
                     " has C_out = " + std::to_string(c_out) +
                     " output channels, not divisible by groups = " + std::to_string(groups));
  if (x.size(1) != weight.size(1) * groups)
    throw ShapeError("conv2d: input " + x.shape().str() + " has " + std::to_string(x.size(1)) +
                     " channels, expected input with C_in = weight.size(1)·groups = " +
                     std::to_string(weight.size(1)) + "·" + std::to_string(groups) + " = " +
                     std::to_string(weight.size(1) * groups) + " channels (weight " +
                     weight.shape().str() + ")");
  if (bias.defined()) {
    detail::check_same("conv2d", x, bias);
    if (bias.dim() != 1 || bias.size(0) != c_out)
      throw ShapeError("conv2d: bias " + bias.shape().str() + " does not match weight " +
                       weight.shape().str() + " (expected [" + std::to_string(c_out) + "])");
  }
  Conv2dGeom g;
  g.n = x.size(0), g.c_in = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.c_out = c_out, g.kh = weight.size(2), g.kw = weight.size(3);
  g.stride_h = stride[0], g.stride_w = stride[1], g.pad_h = padding[0], g.pad_w = padding[1];
  g.dil_h = dilation[0], g.dil_w = dilation[1], g.groups = groups;
  const std::int64_t ext_h = dilation[0] * (g.kh - 1) + 1, ext_w = dilation[1] * (g.kw - 1) + 1;
  const std::int64_t in_h = g.h + 2 * padding[0], in_w = g.w + 2 * padding[1];
  if (ext_h > in_h || ext_w > in_w)
    throw ShapeError("conv2d: kernel " + std::to_string(g.kh) + "x" + std::to_string(g.kw) +
                     " (dilated to " + std::to_string(ext_h) + "x" + std::to_string(ext_w) +
                     " by dilation " + to_string(dilation) + ") is larger than the padded input " +
                     std::to_string(in_h) + "x" + std::to_string(in_w) + " (input " +
                     x.shape().str() + ", padding " + to_string(padding) + ", weight " +
                     weight.shape().str() + ")");
  g.out_h = (in_h - ext_h) / stride[0] + 1;
  g.out_w = (in_w - ext_w) / stride[1] + 1;
  return g;
}

// gx = ∂L/∂x, gw = ∂L/∂w and gb = ∂L/∂bias for gy = ∂L/∂y; each only when asked.
std::vector<Tensor> conv2d_backward(const Conv2dGeom& geo, const Tensor& gy, const Tensor& x,
                                    const Tensor& w, bool rx, bool rw, bool rb) {
  Tensor gx, gw, gb;
  if (rx) gx = empty(x.shape(), x.options());
  if (rw) {
    gw = autograd::take_grad_destination(w);  // a GradientReducer bucket slice, when set
    if (!gw.defined()) gw = empty(w.shape(), w.options());
  }
  if (rb) gb = empty({geo.c_out}, w.options());
  if (x.device().is_cuda()) {
    if (rx) cuda_conv_ops::conv2d_backward_input(geo, gy, w, gx);
    if (rw || rb) cuda_conv_ops::conv2d_backward_weight(geo, gy, x, gw, gb);
  } else {
    detail::visit_float(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (rx)
        kernels::dispatch::conv2d_backward_input<T>(geo, gy.data_ptr<T>(), w.data_ptr<T>(),
                                                    gx.data_ptr<T>());
      if (rw || rb)
        kernels::dispatch::conv2d_backward_weight<T>(geo, gy.data_ptr<T>(), x.data_ptr<T>(),
                                                     rw ? gw.data_ptr<T>() : nullptr,
                                                     rb ? gb.data_ptr<T>() : nullptr);
    });
  }
  return {gx, gw, gb};
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2 stride,
              Size2 padding, Size2 dilation, std::int64_t groups) {
  const Conv2dGeom geo = check_conv2d(x, weight, bias, stride, padding, dilation, groups);
  Tensor out = empty({geo.n, geo.c_out, geo.out_h, geo.out_w}, x.options());
  if (x.device().is_cuda()) {
    cuda_conv_ops::conv2d_forward(geo, x, weight, bias, out);
  } else {
    detail::visit_float(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::dispatch::conv2d_forward<T>(geo, x.data_ptr<T>(), weight.data_ptr<T>(),
                                           bias.defined() ? bias.data_ptr<T>() : nullptr,
                                           out.data_ptr<T>());
    });
  }
  if (needs_grad({&x, &weight, &bias}))
    record("ConvolutionBackward", out, {&x, &weight, &bias},
           // Saved without detach(), as linear's inputs (src/ops/linalg.cpp).
           [geo, x, w = weight, rx = x.requires_grad(), rw = weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             return conv2d_backward(geo, g, x, w, rx, rw, rb);
           });
  return out;
}

}  // namespace lockstep
