// Kernel entry points shared by the ops. Two families with the same signatures:
//   ref::  plain loops, the oracle (src/ops/reference/)
//   cpu::  fast kernels: OpenBLAS GEMM, contiguous fast paths (src/ops/cpu/)
// dispatch:: picks one by the thread's KernelMode. Kernels assume checked, contiguous inputs.
#pragma once

#include <cstdint>

#include "lockstep/core/tensor.h"
#include "lockstep/ops/kernel_mode.h"

namespace lockstep::kernels {

enum class BinaryOp { Add, Sub, Mul, Div };

/// C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(X) = Xᵀ when trans. When beta == 0, C
/// is not read.
template <class T>
using GemmFn = void (*)(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                        T alpha, const T* a, std::int64_t lda, const T* b, std::int64_t ldb,
                        T beta, T* c, std::int64_t ldc);

/// y[rows, out] = x[rows, in] · w[out, in]ᵀ + bias[out] (bias may be null) through `gemm` (a
/// GemmFn): with a bias, y is preset to it and one GEMM with beta = 1 accumulates into it, as
/// addmm does; without, one GEMM with beta = 0.
template <class T, class Gemm>
void linear_by_gemm(Gemm gemm, const T* x, const T* w, const T* bias, T* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out) {
  if (bias)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < out; ++j) y[r * out + j] = bias[j];
  gemm(false, true, rows, out, in, T(1), x, in, w, in, bias ? T(1) : T(0), y, out);
}

namespace ref {
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc);
/// y[rows, out] = x[rows, in] · w[out, in]ᵀ + bias[out] (bias may be null): torch.nn.functional.linear.
template <class T>
void linear(const T* x, const T* w, const T* bias, T* y, std::int64_t rows, std::int64_t in,
            std::int64_t out);
/// out = a op b with NumPy broadcasting (out already has the broadcast shape).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
/// out[r] = sum over the broadcast positions of `in` that map to r (reduces `in` to out's shape,
/// where out's shape is a broadcast-compatible shape of in's).
void sum_to(const Tensor& in, Tensor& out);
/// Per-row loss terms and dlogits for mean cross-entropy; returns (loss sum, count).
template <class T>
void cross_entropy(const T* logits, const std::int64_t* target, std::int64_t n, std::int64_t c,
                   std::int64_t ignore_index, double* loss_sum, std::int64_t* count, T* prob_out);
}  // namespace ref

namespace cpu {
template <class T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc);
template <class T>
void linear(const T* x, const T* w, const T* bias, T* y, std::int64_t rows, std::int64_t in,
            std::int64_t out);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
void sum_to(const Tensor& in, Tensor& out);
template <class T>
void cross_entropy(const T* logits, const std::int64_t* target, std::int64_t n, std::int64_t c,
                   std::int64_t ignore_index, double* loss_sum, std::int64_t* count, T* prob_out);
/// The exact GELU of n contiguous floats (src/ops/cpu/gelu.cpp): y = gelu(x), and its backward
/// gi = g·gelu'(x); the bits of kernels::shared::gelu_fwd / gelu_bwd, vectorised.
void gelu_f32(const float* x, float* y, std::int64_t n);
void gelu_backward_f32(const float* g, const float* x, float* gi, std::int64_t n);
}  // namespace cpu

namespace dispatch {
inline bool reference() { return ops::kernel_mode() == ops::KernelMode::Reference; }

template <class T>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  if (reference())
    ref::gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    cpu::gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
template <class T>
void linear(const T* x, const T* w, const T* bias, T* y, std::int64_t rows, std::int64_t in,
            std::int64_t out) {
  reference() ? ref::linear<T>(x, w, bias, y, rows, in, out)
              : cpu::linear<T>(x, w, bias, y, rows, in, out);
}
inline void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  reference() ? ref::binary(op, a, b, out) : cpu::binary(op, a, b, out);
}
inline void sum_to(const Tensor& in, Tensor& out) {
  reference() ? ref::sum_to(in, out) : cpu::sum_to(in, out);
}
template <class T>
void cross_entropy(const T* logits, const std::int64_t* target, std::int64_t n, std::int64_t c,
                   std::int64_t ignore_index, double* loss_sum, std::int64_t* count, T* prob) {
  if (reference())
    ref::cross_entropy<T>(logits, target, n, c, ignore_index, loss_sum, count, prob);
  else
    cpu::cross_entropy<T>(logits, target, n, c, ignore_index, loss_sum, count, prob);
}
}  // namespace dispatch

}  // namespace lockstep::kernels
