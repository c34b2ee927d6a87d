// Internal: the per-row coefficients and per-element bodies of layer_norm, written ONCE for the
// host and the GPU (plain C++17, __host__ __device__ under nvcc), so the fast CPU kernels
// (src/ops/cpu/layer_norm.cpp) and the CUDA kernels (src/ops/cuda/layer_norm.cu) compute the
// same expressions in the same order. The reference kernels (src/ops/reference/
// layer_norm_embedding.cpp) do NOT use them: they are the independent oracle.
//
// A row is one of the `rows` slices of `cols` = prod(normalized_shape) contiguous elements. Its
// mean and rstd = 1/sqrt(σ²_biased + eps) are double, rounded to T once each for the
// normalization y = ((x − mean)·rstd)·w[j] + b[j] in T: PyTorch's CUDA form
// (aten/src/ATen/native/cuda/layer_norm_kernel.cu, RowwiseMomentsCUDAKernel / LayerNormForward
// CUDAKernel). Its CPU form, x·rstd + (−mean·rstd), cancels badly when |mean| ≫ σ (a row of
// one value gives bias + O(|x|·2⁻²⁴·rstd) unless every rounding lines up); the subtraction is
// exact there. The backward of a row is batch norm's training form applied to g = dy·w:
//   dx = (g − Σg/n − (x − mean)·Σg(x − mean)·rstd²/n)·rstd
// (PyTorch's layer_norm_backward_frame, rearranged).
#pragma once

#include <cstdint>

#include "ops/pool_norm_bodies.h"

namespace lockstep::kernels::shared {

/// x viewed as [rows, cols]: rows the product of the leading sizes, cols normalized_shape's.
struct LnGeom {
  std::int64_t rows = 0, cols = 0;
};

/// 1 / sqrt(var + eps) in double (PyTorch's rstd: infinite when var and eps are both 0).
LOCKSTEP_HOST_DEVICE inline double ln_rstd(double var, double eps) {
  return r::div(1.0, r::sqrt(r::add(var, eps)));
}

/// A row's mean and rstd rounded to T, the coefficients of its normalization.
template <class T>
struct LnRow {
  T mean, rstd;
};
template <class T>
LOCKSTEP_HOST_DEVICE inline LnRow<T> ln_row(double mean, double rstd) {
  return {static_cast<T>(mean), static_cast<T>(rstd)};
}

/// Element j of a row: ((x − mean)·rstd)·w[j] + b[j]; w, b nullable (1 and 0).
template <class T>
LOCKSTEP_HOST_DEVICE inline T ln_apply_one(T x, const LnRow<T>& q, const T* w, const T* b,
                                           std::int64_t j) {
  T y = r::mul(r::sub(x, q.mean), q.rstd);
  if (w) y = r::mul(y, w[j]);
  if (b) y = r::add(y, b[j]);
  return y;
}

/// g = dy·w[j] (w nullable: dy) in double, the term of a row's gradient sums. For float the
/// product is exact in double.
template <class T>
LOCKSTEP_HOST_DEVICE inline double ln_g(T dy, const T* w, std::int64_t j) {
  return w ? r::mul(static_cast<double>(dy), static_cast<double>(w[j])) : static_cast<double>(dy);
}

/// The backward coefficients of a row from Σg and Σg·(x − mean) over its n elements (batch
/// norm's training coefficients, scale = rstd).
template <class T>
LOCKSTEP_HOST_DEVICE inline BnGradCoeffs<T> ln_grad_coeffs(double mean, double rstd, double sum_g,
                                                           double dot, double n) {
  return bn_grad_coeffs<T>(mean, rstd, sum_g, dot, n, static_cast<const T*>(nullptr), 0, true);
}

/// dx of element j of a row: batch norm's training dx of g = dy·w[j] (rounded to T once).
template <class T>
LOCKSTEP_HOST_DEVICE inline T ln_grad_one(T dy, T x, const T* w, std::int64_t j,
                                          const BnGradCoeffs<T>& q) {
  return bn_grad_one(w ? r::mul(dy, w[j]) : dy, x, q, true);
}

}  // namespace lockstep::kernels::shared
