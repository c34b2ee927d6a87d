// Kernels of conv2d (lockstep/ops/conv.h), in the two families of src/ops/kernels.h:
//   ref::  plain loops over the definition, the oracle (src/ops/reference/conv.cpp)
//   cpu::  im2col + GEMM per sample and group (Caffe's and PyTorch's slow_conv2d structure:
//          BVLC/caffe src/caffe/layers/base_conv_layer.cpp, aten/src/ATen/native/
//          ConvolutionMM2d.cpp) through kernels::cpu::gemm (src/ops/cpu/conv.cpp)
// dispatch:: picks one by the thread's KernelMode. All pointers are host memory, contiguous NCHW
// (x [N, C_in, H, W], y [N, C_out, H_out, W_out]) and OIHW (w [C_out, C_in / groups, kH, kW]);
// sizes are checked by the op (src/ops/conv.cpp) and may be zero (N = 0).
#pragma once

#include <cstdint>

#include "lockstep/ops/kernel_mode.h"

namespace lockstep::kernels {

/// The sizes of one conv2d call; out_h/out_w follow PyTorch's formula
/// floor((H + 2·pad − dil·(k − 1) − 1) / stride) + 1.
struct Conv2dGeom {
  std::int64_t n = 0, c_in = 0, h = 0, w = 0;  ///< input [n, c_in, h, w]
  std::int64_t c_out = 0, kh = 0, kw = 0;      ///< weight [c_out, c_in / groups, kh, kw]
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  std::int64_t groups = 1;
  std::int64_t out_h = 0, out_w = 0;

  std::int64_t cin_g() const { return c_in / groups; }         ///< input channels per group
  std::int64_t cout_g() const { return c_out / groups; }       ///< output channels per group
  std::int64_t col_rows() const { return cin_g() * kh * kw; }  ///< K of the per-group GEMM
  std::int64_t out_hw() const { return out_h * out_w; }
  std::int64_t x_numel() const { return n * c_in * h * w; }
  std::int64_t y_numel() const { return n * c_out * out_hw(); }
  std::int64_t w_numel() const { return c_out * cin_g() * kh * kw; }
};

namespace ref {
/// y = conv2d(x, w) + bias (bias [c_out] may be null). Each output is bias + Σ over (c, p, q)
/// in that order.
template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y);
/// gx = ∂L/∂x for gy = ∂L/∂y (gx is written, not accumulated).
template <class T>
void conv2d_backward_input(const Conv2dGeom& g, const T* gy, const T* w, T* gx);
/// gw = ∂L/∂w (when non-null) and gb[o] = Σ_{n, i, j} gy[n, o, i, j] (when non-null); written,
/// not accumulated. With n = 0 both are zero.
template <class T>
void conv2d_backward_weight(const Conv2dGeom& g, const T* gy, const T* x, T* gw, T* gb);
}  // namespace ref

namespace cpu {
/// Same contracts as ref::. Forward and backward_input run samples in parallel on the calling
/// thread's intra-op team (each sample's result is the same whatever the split: one GEMM per
/// sample and group); backward_weight sums the samples in fixed chunks of 8 (in order within a
/// chunk), the chunks in parallel, then the chunks' sums in chunk order. So no bit depends on
/// the thread count (the order depends on N only).
template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y);
template <class T>
void conv2d_backward_input(const Conv2dGeom& g, const T* gy, const T* w, T* gx);
template <class T>
void conv2d_backward_weight(const Conv2dGeom& g, const T* gy, const T* x, T* gw, T* gb);
}  // namespace cpu

namespace dispatch {
template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y) {
  if (ops::kernel_mode() == ops::KernelMode::Reference)
    ref::conv2d_forward<T>(g, x, w, bias, y);
  else
    cpu::conv2d_forward<T>(g, x, w, bias, y);
}
template <class T>
void conv2d_backward_input(const Conv2dGeom& g, const T* gy, const T* w, T* gx) {
  if (ops::kernel_mode() == ops::KernelMode::Reference)
    ref::conv2d_backward_input<T>(g, gy, w, gx);
  else
    cpu::conv2d_backward_input<T>(g, gy, w, gx);
}
template <class T>
void conv2d_backward_weight(const Conv2dGeom& g, const T* gy, const T* x, T* gw, T* gb) {
  if (ops::kernel_mode() == ops::KernelMode::Reference)
    ref::conv2d_backward_weight<T>(g, gy, x, gw, gb);
  else
    cpu::conv2d_backward_weight<T>(g, gy, x, gw, gb);
}
}  // namespace dispatch

}  // namespace lockstep::kernels
