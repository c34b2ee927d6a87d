// Internal: the per-element bodies of max_pool2d, avg_pool2d, adaptive_avg_pool2d and
// batch_norm, written ONCE for the host and the GPU (plain C++17, __host__ __device__ under
// nvcc), so the fast CPU kernels (src/ops/cpu/pool_norm.cpp) and the CUDA kernels
// (src/ops/cuda/pool_norm.cu) compute the same expressions in the same order. The reference
// kernels (src/ops/reference/pool_norm.cpp) do NOT use them: they are the independent oracle.
//
// Pools: one output element per forward call (its window in row-major order), one input
// element per backward call (a gather over the outputs whose window holds it, in increasing
// output order: the order PyTorch's scatter loops add in, so no atomics and the same sums).
// Batch norm: per-channel coefficients from double statistics, then one element per call.
// Arithmetic goes through optim::rules (round-to-nearest intrinsics on the GPU, which nvcc never
// fuses into an FMA).
#pragma once

#include <math.h>

#include <cstdint>

#include "lockstep/ops/detail/update_rules.h"

namespace lockstep::kernels::shared {

namespace r = ::lockstep::optim::rules;

/// The geometry of a 2-d pooling over `planes` = N·C contiguous [in_h, in_w] planes into
/// [out_h, out_w] planes. k/s/p (kernel, stride, padding) are unused by adaptive pooling.
struct PoolGeom {
  std::int64_t planes = 0;
  std::int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  std::int64_t k_h = 1, k_w = 1, s_h = 1, s_w = 1, p_h = 0, p_w = 0;
};

LOCKSTEP_HOST_DEVICE inline std::int64_t min64(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}
LOCKSTEP_HOST_DEVICE inline std::int64_t max64(std::int64_t a, std::int64_t b) {
  return a > b ? a : b;
}

/// The outputs o (along one dimension) whose window [o·s − p, o·s − p + k) holds input i:
/// [lo, hi], empty when lo > hi.
LOCKSTEP_HOST_DEVICE inline void windows_holding(std::int64_t i, std::int64_t k, std::int64_t s,
                                                 std::int64_t p, std::int64_t out, std::int64_t& lo,
                                                 std::int64_t& hi) {
  const std::int64_t first = i + p - k + 1;  // o·s ≥ first
  lo = first <= 0 ? 0 : (first + s - 1) / s;
  hi = min64((i + p) / s, out - 1);
}

/// max_pool2d of output (oh, ow) of one plane: the window's maximum and its index in the plane.
/// PyTorch's loop (aten/src/ATen/native/cpu/MaxPoolKernel.cpp, cpu_max_pool): the index starts
/// at the window's first in-image element, and an element replaces the maximum when it is
/// greater or NaN — so the first maximum of ties wins, and the last NaN.
template <class T>
LOCKSTEP_HOST_DEVICE inline void max_pool_one(const T* plane, const PoolGeom& g, std::int64_t oh,
                                              std::int64_t ow, T* out, std::int64_t* index) {
  const std::int64_t h0 = oh * g.s_h - g.p_h, w0 = ow * g.s_w - g.p_w;
  const std::int64_t h1 = min64(h0 + g.k_h, g.in_h), w1 = min64(w0 + g.k_w, g.in_w);
  const std::int64_t hs = max64(h0, 0), ws = max64(w0, 0);
  std::int64_t best = hs * g.in_w + ws;
  T m = -static_cast<T>(INFINITY);
  for (std::int64_t h = hs; h < h1; ++h)
    for (std::int64_t w = ws; w < w1; ++w) {
      const T v = plane[h * g.in_w + w];
      if (v > m || v != v) {
        m = v;
        best = h * g.in_w + w;
      }
    }
  *out = m;
  *index = best;
}

/// The gradient of input (h, w) of one plane: Σ gy[o] over the outputs o of its windows whose
/// saved index is this element, in increasing o.
template <class T>
LOCKSTEP_HOST_DEVICE inline T max_pool_grad_one(const T* gy_plane, const std::int64_t* idx_plane,
                                                const PoolGeom& g, std::int64_t h, std::int64_t w) {
  std::int64_t oh0, oh1, ow0, ow1;
  windows_holding(h, g.k_h, g.s_h, g.p_h, g.out_h, oh0, oh1);
  windows_holding(w, g.k_w, g.s_w, g.p_w, g.out_w, ow0, ow1);
  const std::int64_t self = h * g.in_w + w;
  T acc = T(0);
  for (std::int64_t oh = oh0; oh <= oh1; ++oh)
    for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
      const std::int64_t o = oh * g.out_w + ow;
      if (idx_plane[o] == self) acc = r::add(acc, gy_plane[o]);
    }
  return acc;
}

/// avg_pool2d of output (oh, ow), count_include_pad: the in-image window summed in T in
/// row-major order, divided by k_h·k_w (PyTorch's cpu_avg_pool, AvgPoolKernel.cpp: with
/// ceil_mode false every window lies inside the padded image, so its divisor is the kernel's
/// area).
template <class T>
LOCKSTEP_HOST_DEVICE inline T avg_pool_one(const T* plane, const PoolGeom& g, std::int64_t oh,
                                           std::int64_t ow) {
  const std::int64_t h0 = oh * g.s_h - g.p_h, w0 = ow * g.s_w - g.p_w;
  const std::int64_t h1 = min64(h0 + g.k_h, g.in_h), w1 = min64(w0 + g.k_w, g.in_w);
  T sum = T(0);
  for (std::int64_t h = max64(h0, 0); h < h1; ++h)
    for (std::int64_t w = max64(w0, 0); w < w1; ++w) sum = r::add(sum, plane[h * g.in_w + w]);
  return r::div(sum, static_cast<T>(g.k_h * g.k_w));
}

/// The gradient of input (h, w): Σ gy[o] / (k_h·k_w) over the windows holding it, in increasing o.
template <class T>
LOCKSTEP_HOST_DEVICE inline T avg_pool_grad_one(const T* gy_plane, const PoolGeom& g,
                                                std::int64_t h, std::int64_t w) {
  std::int64_t oh0, oh1, ow0, ow1;
  windows_holding(h, g.k_h, g.s_h, g.p_h, g.out_h, oh0, oh1);
  windows_holding(w, g.k_w, g.s_w, g.p_w, g.out_w, ow0, ow1);
  const T div = static_cast<T>(g.k_h * g.k_w);
  T acc = T(0);
  for (std::int64_t oh = oh0; oh <= oh1; ++oh)
    for (std::int64_t ow = ow0; ow <= ow1; ++ow)
      acc = r::add(acc, r::div(gy_plane[oh * g.out_w + ow], div));
  return acc;
}

/// Adaptive pooling's bin o of `out` over `in` elements: [start, end), PyTorch's start_index /
/// end_index (aten/src/ATen/native/AdaptivePooling.h): floor(o·in/out), ceil((o+1)·in/out).
LOCKSTEP_HOST_DEVICE inline std::int64_t adaptive_start(std::int64_t o, std::int64_t out,
                                                        std::int64_t in) {
  return (o / out) * in + ((o % out) * in) / out;
}
LOCKSTEP_HOST_DEVICE inline std::int64_t adaptive_end(std::int64_t o, std::int64_t out,
                                                      std::int64_t in) {
  return 1 + ((o + 1) * in - 1) / out;
}

/// adaptive_avg_pool2d of output (oh, ow): the bin summed in T in row-major order, then
/// sum / kh / kw (two divisions, as PyTorch's cpu_adaptive_avg_pool).
template <class T>
LOCKSTEP_HOST_DEVICE inline T adaptive_avg_one(const T* plane, const PoolGeom& g, std::int64_t oh,
                                               std::int64_t ow) {
  const std::int64_t h0 = adaptive_start(oh, g.out_h, g.in_h),
                     h1 = adaptive_end(oh, g.out_h, g.in_h);
  const std::int64_t w0 = adaptive_start(ow, g.out_w, g.in_w),
                     w1 = adaptive_end(ow, g.out_w, g.in_w);
  T sum = T(0);
  for (std::int64_t h = h0; h < h1; ++h)
    for (std::int64_t w = w0; w < w1; ++w) sum = r::add(sum, plane[h * g.in_w + w]);
  return r::div(r::div(sum, static_cast<T>(h1 - h0)), static_cast<T>(w1 - w0));
}

/// The bins along one dimension that may hold input i: a superset [lo, hi] (membership is
/// checked by the caller with adaptive_start / adaptive_end).
LOCKSTEP_HOST_DEVICE inline void adaptive_candidates(std::int64_t i, std::int64_t out,
                                                     std::int64_t in, std::int64_t& lo,
                                                     std::int64_t& hi) {
  lo = max64((i * out) / in - 1, 0);
  hi = min64(((i + 1) * out) / in, out - 1);
}

/// The gradient of input (h, w): Σ gy[o] / kh / kw over the bins holding it, in increasing o.
template <class T>
LOCKSTEP_HOST_DEVICE inline T adaptive_avg_grad_one(const T* gy_plane, const PoolGeom& g,
                                                    std::int64_t h, std::int64_t w) {
  std::int64_t oh0, oh1, ow0, ow1;
  adaptive_candidates(h, g.out_h, g.in_h, oh0, oh1);
  adaptive_candidates(w, g.out_w, g.in_w, ow0, ow1);
  T acc = T(0);
  for (std::int64_t oh = oh0; oh <= oh1; ++oh) {
    const std::int64_t h0 = adaptive_start(oh, g.out_h, g.in_h),
                       h1 = adaptive_end(oh, g.out_h, g.in_h);
    if (h < h0 || h >= h1) continue;
    for (std::int64_t ow = ow0; ow <= ow1; ++ow) {
      const std::int64_t w0 = adaptive_start(ow, g.out_w, g.in_w),
                         w1 = adaptive_end(ow, g.out_w, g.in_w);
      if (w < w0 || w >= w1) continue;
      acc = r::add(acc, r::div(r::div(gy_plane[oh * g.out_w + ow], static_cast<T>(h1 - h0)),
                               static_cast<T>(w1 - w0)));
    }
  }
  return acc;
}

// ---- batch norm -------------------------------------------------------------------------------

/// x viewed as [n, c, spatial] (spatial = 1 for 2-d input).
struct BnGeom {
  std::int64_t n = 0, c = 0, spatial = 1;
};

/// 1 / sqrt(var + eps), and 0 when var and eps are both 0 (PyTorch's InvStd,
/// aten/src/ATen/native/Normalization.cpp), in double.
LOCKSTEP_HOST_DEVICE inline double bn_invstd(double var, double eps) {
  if (var == 0.0 && eps == 0.0) return 0.0;
  return r::div(1.0, r::sqrt(r::add(var, eps)));
}

/// One running-statistic update, in double: momentum·stat + (1 − momentum)·running
/// (aten/src/ATen/native/Normalization.cpp, batch_norm_cpu_update_stats_template).
LOCKSTEP_HOST_DEVICE inline double bn_running(double running, double stat, double momentum) {
  return r::add(r::mul(momentum, stat), r::mul(r::sub(1.0, momentum), running));
}

/// The affine form of the normalization of channel c: y = x·alpha + beta, alpha = invstd·w,
/// beta = b − mean·alpha, computed in double and rounded to T once each (PyTorch's
/// batch_norm_cpu_collect_linear_and_constant_terms; it computes them in the op math type).
template <class T>
LOCKSTEP_HOST_DEVICE inline void bn_affine_coeffs(double mean, double invstd, const T* w,
                                                  const T* b, std::int64_t c, T& alpha, T& beta) {
  const double a = r::mul(invstd, w ? static_cast<double>(w[c]) : 1.0);
  alpha = static_cast<T>(a);
  beta = static_cast<T>(r::sub(b ? static_cast<double>(b[c]) : 0.0, r::mul(mean, a)));
}
template <class T>
LOCKSTEP_HOST_DEVICE inline T bn_apply_one(T x, T alpha, T beta) {
  return r::add(r::mul(x, alpha), beta);
}

/// The backward coefficients of channel c from Σdy and Σdy·(x − mean) (double; m values):
/// training  dx = (dy − sum_dy/m − (x − mean)·dot·invstd²/m) · invstd·w
/// eval      dx = dy · invstd·w
/// (PyTorch's batch_norm_backward_cpu_template). In T, one rounding each.
template <class T>
struct BnGradCoeffs {
  T mean, k, grad_mean, scale;
};
template <class T>
LOCKSTEP_HOST_DEVICE inline BnGradCoeffs<T> bn_grad_coeffs(double mean, double invstd,
                                                           double sum_dy, double dot, double m,
                                                           const T* w, std::int64_t c,
                                                           bool training) {
  BnGradCoeffs<T> out;
  out.mean = static_cast<T>(mean);
  out.k = training ? static_cast<T>(r::div(r::mul(r::mul(dot, invstd), invstd), m)) : T(0);
  out.grad_mean = training ? static_cast<T>(r::div(sum_dy, m)) : T(0);
  out.scale = static_cast<T>(r::mul(invstd, w ? static_cast<double>(w[c]) : 1.0));
  return out;
}
template <class T>
LOCKSTEP_HOST_DEVICE inline T bn_grad_one(T dy, T x, const BnGradCoeffs<T>& q, bool training) {
  if (!training) return r::mul(dy, q.scale);
  return r::mul(r::sub(r::sub(dy, q.grad_mean), r::mul(r::sub(x, q.mean), q.k)), q.scale);
}

}  // namespace lockstep::kernels::shared
