// Internal: the batched GEMM of matmul over leading dimensions (src/ops/batched_matmul.cpp), in
// the two kernel families of src/ops/kernels.h:
//   ref::  one reference GEMM per batch index (the oracle);
//   cpu::  one fast GEMM (cpu::gemm) per batch index, the batch split over the calling thread's
//          team in contiguous ranges, each GEMM on one thread: the bits do not depend on the
//          thread count (a GEMM split over threads does change them on some CPUs, see
//          src/ops/cpu/conv.cpp's weight gradient).
// dispatch:: picks one by the thread's KernelMode.
#pragma once

#include <cstdint>

#include "ops/attention_bodies.h"
#include "ops/kernels.h"

namespace lockstep::kernels {

/// C_i = op(A_i) op(B_i), i < batch, row-major with contiguous matrices: A_i = a + i·stride_a is
/// [m, k] ([k, m] when trans_a), B_i = b + i·stride_b is [k, n] ([n, k] when trans_b), C_i = c +
/// i·m·n is [m, n]. A stride of 0 uses one matrix for every i (a broadcast operand). C is not
/// read.
template <class T>
using GemmBatchedFn = void (*)(bool trans_a, bool trans_b, std::int64_t batch, std::int64_t m,
                               std::int64_t n, std::int64_t k, const T* a, std::int64_t stride_a,
                               const T* b, std::int64_t stride_b, T* c);

/// The loop over the batch of a GemmBatchedFn through a GemmFn `gemm`, batches [lo, hi).
template <class T, class Gemm>
void gemm_batch_range(Gemm gemm, bool ta, bool tb, std::int64_t lo, std::int64_t hi, std::int64_t m,
                      std::int64_t n, std::int64_t k, const T* a, std::int64_t stride_a, const T* b,
                      std::int64_t stride_b, T* c) {
  const std::int64_t lda = ta ? m : k, ldb = tb ? k : n;
  for (std::int64_t i = lo; i < hi; ++i)
    gemm(ta, tb, m, n, k, T(1), a + i * stride_a, lda, b + i * stride_b, ldb, T(0), c + i * m * n,
         n);
}

namespace ref {
template <class T>
void gemm_batched(bool ta, bool tb, std::int64_t batch, std::int64_t m, std::int64_t n,
                  std::int64_t k, const T* a, std::int64_t stride_a, const T* b,
                  std::int64_t stride_b, T* c) {
  gemm_batch_range<T>(&gemm<T>, ta, tb, 0, batch, m, n, k, a, stride_a, b, stride_b, c);
}
}  // namespace ref

namespace cpu {
template <class T>
void gemm_batched(bool ta, bool tb, std::int64_t batch, std::int64_t m, std::int64_t n,
                  std::int64_t k, const T* a, std::int64_t stride_a, const T* b,
                  std::int64_t stride_b, T* c);
}  // namespace cpu

namespace dispatch {
template <class T>
void gemm_batched(bool ta, bool tb, std::int64_t batch, std::int64_t m, std::int64_t n,
                  std::int64_t k, const T* a, std::int64_t stride_a, const T* b,
                  std::int64_t stride_b, T* c) {
  (reference() ? &ref::gemm_batched<T> : &cpu::gemm_batched<T>)(ta, tb, batch, m, n, k, a, stride_a,
                                                                b, stride_b, c);
}
}  // namespace dispatch

}  // namespace lockstep::kernels

namespace lockstep::detail {

/// matmul (src/ops/linalg.cpp) of inputs that are not both 2-d: the batched product with its
/// checks and autograd (src/ops/batched_matmul.cpp). bf16: autocast's GEMM, as gemm2d's.
Tensor matmul_batched(const Tensor& a, const Tensor& b, bool bf16);

}  // namespace lockstep::detail

namespace lockstep::kernels::cpu {

// The operand layouts of the fused attention (src/ops/attention_bodies.h).
using shared::AttentionLayouts;
using shared::contiguous_slices;
using shared::SliceLayout;

/// Fused scaled dot-product attention of `batch` independent slices (one per batch·head), the
/// fast path of scaled_dot_product_attention (CPU, no dropout, no autocast): slice b's q [L, E],
/// k [S, E], v [S, Ev] and out [L, Ev] where `at` places them (contiguous [batch, ·, ·] for
/// scaled_dot_product_attention, strided views of c_attn's [B, T, 3C] output and a [B, T, C]
/// output for qkv_attention); lse [batch, L] receives each query row's log Σ exp(scores) in
/// double, from which the backward recomputes the weights. Per slice: scores = scale·q·kᵀ in one
/// cpu::gemm (alpha = scale; the row strides as leading dimensions), each row's softmax (max and
/// Σ exp in double, float32's exponentials on float_math.h's exp; causal row i stops at key
/// min(i + 1, S), the rest of the row is 0), out = weights·v in one GEMM; the weights live in a
/// per-task scratch block, not in [B, H, L, S] autograd tensors. The slices are split over the
/// calling thread's team, each slice's GEMMs on one thread (as gemm_batched: no bit depends on
/// the team).
template <class T>
void attention_forward(std::int64_t batch, std::int64_t l, std::int64_t s, std::int64_t e,
                       std::int64_t ev, const AttentionLayouts& at, const T* q, const T* k,
                       const T* v, double scale, bool causal, T* out, double* lse);
/// Its backward, the weights w recomputed from lse: gv = wᵀ·gout, dw = gout·vᵀ,
/// ds = w ⊙ (dw − Σ_j w·dw) (the row sum in double), gq = scale·ds·k, gk = scale·dsᵀ·q, each
/// product one GEMM; gq, gk, gv laid out as q, k, v (every element written).
template <class T>
void attention_backward(std::int64_t batch, std::int64_t l, std::int64_t s, std::int64_t e,
                        std::int64_t ev, const AttentionLayouts& at, const T* q, const T* k,
                        const T* v, const double* lse, const T* gout, double scale, bool causal,
                        T* gq, T* gk, T* gv);

}  // namespace lockstep::kernels::cpu
