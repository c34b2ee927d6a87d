// Kernels of conv2d (lockstep/ops/conv.h): the two families of src/ops/kernels.h and oneDNN's:
//   ref::  plain loops over the definition, the oracle (src/ops/reference/conv.cpp)
//   cpu::  im2col + GEMM per sample and group (Caffe's and PyTorch's slow_conv2d structure:
//          BVLC/caffe:src/caffe/layers/base_conv_layer.cpp,
//          pytorch/pytorch:aten/src/ATen/native/ConvolutionMM2d.cpp) through kernels::cpu::gemm
//          (src/ops/cpu/conv.cpp)
//   dnnl:: oneDNN 2.6's convolution primitives in its blocked layouts, float32 only (oneDNN has
//          no float64 convolution), when built with LOCKSTEP_HAS_DNNL (src/ops/cpu/conv_dnnl.cpp)
// dispatch:: picks one by the thread's KernelMode: Reference → ref::; Fast → dnnl:: for float32
// when built with it (falling back to cpu:: where it declines: N = 0, a bias-only gradient, a
// shape oneDNN refuses), else cpu::. Why (batch 128, 2 threads, fwd + bwd, AVX-512 host):
// Conv2d(16, 32, 3, padding 1) on 14×14 takes 6.8–7.1 ms with im2col, 3.2–3.6 ms with oneDNN's
// blocked layouts (jit:avx512_core, reorders from/to NCHW included); Conv2d(1, 16, 3, padding 1)
// on 28×28 (weight and bias gradients) is about equal (1.07–1.28 vs 1.08–1.35 ms). oneDNN on
// plain NCHW memory (gemm:jit) was slower than im2col everywhere, so it is not used. As built
// here (chunks of 16 on lockstep's team, same host, medians): 0.84–0.86 vs 0.89–0.95 ms and
// 2.6–2.7 vs 5.2–5.3 ms for those two layers, so float32 takes dnnl:: at every shape. The whole
// CNN step (bench/bench_cnn.cpp, batch 128, medians of 3): 6,648 → 8,582 samples/s on 1 device
// (2 threads), 7,999 → 10,957 on 2 (1 thread each).
// Threads: both fast families split the batch over the calling thread's intra-op team
// (lockstep/core/parallel.h); dnnl:: runs oneDNN with 1 OpenMP thread per chunk (its own
// OpenMP team measured slower: idle libgomp workers spin on the cores the next op needs).
// Bits: both cpu:: and dnnl:: promise results independent of the intra-op thread count (fixed
// chunks of samples, their sums added in chunk order); the two families' bits differ.
#pragma once

#include <cstdint>
#include <type_traits>

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

namespace dnnl {
/// Whether this build has oneDNN (LOCKSTEP_HAS_DNNL); without it every call returns false.
bool available();
/// The contracts of ref::, float32. Each returns false, having written nothing, when it does
/// not handle the call (no oneDNN, N = 0, gw null, or oneDNN refuses the shape); the caller
/// then runs cpu::. The batch runs in fixed chunks of 16 samples, one oneDNN call each (1
/// OpenMP thread), the chunks spread over the calling thread's intra-op team; the weight and
/// bias gradients add the chunks' sums in chunk order. So no bit depends on the thread count.
bool conv2d_forward(const Conv2dGeom& g, const float* x, const float* w, const float* bias,
                    float* y);
bool conv2d_backward_input(const Conv2dGeom& g, const float* gy, const float* w, float* gx);
bool conv2d_backward_weight(const Conv2dGeom& g, const float* gy, const float* x, float* gw,
                            float* gb);
}  // namespace dnnl

namespace dispatch {
template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y) {
  if (ops::kernel_mode() == ops::KernelMode::Reference)
    return ref::conv2d_forward<T>(g, x, w, bias, y);
  if constexpr (std::is_same_v<T, float>)
    if (dnnl::conv2d_forward(g, x, w, bias, y)) return;
  cpu::conv2d_forward<T>(g, x, w, bias, y);
}
template <class T>
void conv2d_backward_input(const Conv2dGeom& g, const T* gy, const T* w, T* gx) {
  if (ops::kernel_mode() == ops::KernelMode::Reference)
    return ref::conv2d_backward_input<T>(g, gy, w, gx);
  if constexpr (std::is_same_v<T, float>)
    if (dnnl::conv2d_backward_input(g, gy, w, gx)) return;
  cpu::conv2d_backward_input<T>(g, gy, w, gx);
}
template <class T>
void conv2d_backward_weight(const Conv2dGeom& g, const T* gy, const T* x, T* gw, T* gb) {
  if (ops::kernel_mode() == ops::KernelMode::Reference)
    return ref::conv2d_backward_weight<T>(g, gy, x, gw, gb);
  if constexpr (std::is_same_v<T, float>)
    if (dnnl::conv2d_backward_weight(g, gy, x, gw, gb)) return;
  cpu::conv2d_backward_weight<T>(g, gy, x, gw, gb);
}
}  // namespace dispatch

}  // namespace lockstep::kernels
