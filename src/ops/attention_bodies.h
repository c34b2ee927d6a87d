// Internal: the fused attention's per-row bodies, written ONCE for the host and the GPU (plain
// C++17, __host__ __device__ under nvcc): the CUDA kernels of src/ops/cuda/attention.cu run one
// thread per query row (forward, the query gradient) or key row (key and value gradients) on
// them, and tests/ops/attention_bodies_test.cpp runs the same per-index functions on the host
// against the fused CPU kernel (src/ops/cpu/attention.cpp). No [L, S] block is held: each row
// recomputes its scores (FlashAttention-2's backward split, Dao 2023, §3.1.2: D_i = Σ_j w_ij·dp_ij,
// ds = w·(dp − D)), so memory is O(L) per slice beyond the operands.
// Arithmetic: dot products and the softmax in double (the exponentials and logarithm of
// device_ops.h: the C library on the host, CUDA's on the GPU), each output element accumulated
// in T in key (or query) order, as a GEMM's dot product.
#pragma once

#include <cstdint>

#include "ops/device_ops.h"

namespace lockstep::kernels::shared {

/// Where the rows of each attention slice lie in one operand: slice b (< batch) is (n, h) =
/// (b / heads, b % heads), and its row i starts n·batch_stride + h·head_stride + i·row_stride
/// elements after the operand's base (its elements in a row contiguous). Contiguous
/// [batch, R, W] matrices are contiguous_slices(R, W); nanoGPT's c_attn output [B, T, 3·C] holds
/// head h of q (k, v) at column h·hs (C + h·hs, 2·C + h·hs): {n_head, T·3C, hs, 3C}.
struct SliceLayout {
  std::int64_t heads = 1, batch_stride = 0, head_stride = 0, row_stride = 0;
  LOCKSTEP_HOST_DEVICE std::int64_t offset(std::int64_t b) const {
    return b / heads * batch_stride + b % heads * head_stride;
  }
  LOCKSTEP_HOST_DEVICE std::int64_t row(std::int64_t b, std::int64_t i) const {
    return offset(b) + i * row_stride;
  }
};
inline SliceLayout contiguous_slices(std::int64_t rows, std::int64_t width) {
  return {1, rows * width, 0, width};
}
/// The layouts of q (and gq), k (gk), v (gv) and out (gout).
struct AttentionLayouts {
  SliceLayout q, k, v, out;
};

/// One attention call: `batch` slices of q [L, E], k [S, E], v [S, Ev], out [L, Ev] placed by
/// `at`; lse and d [batch, L] in double. Pointers not used by a pass may be null.
template <class T>
struct AttnArgs {
  std::int64_t batch = 0, l = 0, s = 0, e = 0, ev = 0;
  bool causal = false;
  double scale = 1;
  AttentionLayouts at;
  const T *q = nullptr, *k = nullptr, *v = nullptr, *gout = nullptr;
  T *out = nullptr, *gq = nullptr, *gk = nullptr, *gv = nullptr;
  double *lse = nullptr, *d = nullptr;
};

/// The keys query row i attends: all S, or the first min(i + 1, S) under the causal mask.
LOCKSTEP_HOST_DEVICE inline std::int64_t attn_keys(std::int64_t i, std::int64_t s, bool causal) {
  return causal ? (i + 1 < s ? i + 1 : s) : s;
}

/// Σ_c a[c]·b[c] in double, c in order.
template <class T>
LOCKSTEP_HOST_DEVICE inline double attn_dot(const T* a, const T* b, std::int64_t n) {
  double acc = 0;
  for (std::int64_t c = 0; c < n; ++c)
    acc = r::add(acc, r::mul(static_cast<double>(a[c]), static_cast<double>(b[c])));
  return acc;
}

/// Forward of query row idx = b·L + i: lse = log Σ_j exp(score_j) (max-shifted, in double) over
/// its keys, score_j = scale·q_i·k_j; out_i = Σ_j exp(score_j − lse)·v_j.
template <class T>
LOCKSTEP_HOST_DEVICE inline void attn_forward_row(const AttnArgs<T>& a, std::int64_t idx) {
  const std::int64_t b = idx / a.l, i = idx % a.l, n = attn_keys(i, a.s, a.causal);
  const T* q = a.q + a.at.q.row(b, i);
  const T* k = a.k + a.at.k.offset(b);
  const T* v = a.v + a.at.v.offset(b);
  T* out = a.out + a.at.out.row(b, i);
  const std::int64_t rk = a.at.k.row_stride, rv = a.at.v.row_stride;
  double mx = -HUGE_VAL;
  for (std::int64_t j = 0; j < n; ++j) {
    const double sc = r::mul(a.scale, attn_dot(q, k + j * rk, a.e));
    mx = mx < sc ? sc : mx;
  }
  double sum = 0;
  for (std::int64_t j = 0; j < n; ++j)
    sum = r::add(sum, m_exp(r::sub(r::mul(a.scale, attn_dot(q, k + j * rk, a.e)), mx)));
  const double lse = r::add(mx, m_log(sum));
  a.lse[idx] = lse;
  for (std::int64_t c = 0; c < a.ev; ++c) out[c] = T(0);
  for (std::int64_t j = 0; j < n; ++j) {
    const T w = static_cast<T>(m_exp(r::sub(r::mul(a.scale, attn_dot(q, k + j * rk, a.e)), lse)));
    for (std::int64_t c = 0; c < a.ev; ++c) out[c] = r::add(out[c], r::mul(w, v[j * rv + c]));
  }
}

/// Backward of query row idx: D_i = Σ_j w_j·dp_j (w_j = exp(score_j − lse_i), dp_j = gout_i·v_j)
/// into a.d, and gq_i = scale·Σ_j w_j·(dp_j − D_i)·k_j.
template <class T>
LOCKSTEP_HOST_DEVICE inline void attn_backward_query_row(const AttnArgs<T>& a, std::int64_t idx) {
  const std::int64_t b = idx / a.l, i = idx % a.l, n = attn_keys(i, a.s, a.causal);
  const T* q = a.q + a.at.q.row(b, i);
  const T* k = a.k + a.at.k.offset(b);
  const T* v = a.v + a.at.v.offset(b);
  const T* go = a.gout + a.at.out.row(b, i);
  T* gq = a.gq + a.at.q.row(b, i);
  const std::int64_t rk = a.at.k.row_stride, rv = a.at.v.row_stride;
  const double lse = a.lse[idx];
  double dsum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const double w = m_exp(r::sub(r::mul(a.scale, attn_dot(q, k + j * rk, a.e)), lse));
    dsum = r::add(dsum, r::mul(w, attn_dot(go, v + j * rv, a.ev)));
  }
  a.d[idx] = dsum;
  for (std::int64_t c = 0; c < a.e; ++c) gq[c] = T(0);
  for (std::int64_t j = 0; j < n; ++j) {
    const double w = m_exp(r::sub(r::mul(a.scale, attn_dot(q, k + j * rk, a.e)), lse));
    const T ds = static_cast<T>(
        r::mul(a.scale, r::mul(w, r::sub(attn_dot(go, v + j * rv, a.ev), dsum))));
    for (std::int64_t c = 0; c < a.e; ++c) gq[c] = r::add(gq[c], r::mul(ds, k[j * rk + c]));
  }
}

/// Backward of key row idx = b·S + j (after every query row's D): over the queries i that
/// attend key j (i ≥ j under the causal mask), gv_j = Σ_i w_ij·gout_i and
/// gk_j = scale·Σ_i w_ij·(dp_ij − D_i)·q_i.
template <class T>
LOCKSTEP_HOST_DEVICE inline void attn_backward_key_row(const AttnArgs<T>& a, std::int64_t idx) {
  const std::int64_t b = idx / a.s, j = idx % a.s;
  const T* k = a.k + a.at.k.row(b, j);
  const T* v = a.v + a.at.v.row(b, j);
  T* gk = a.gk + a.at.k.row(b, j);
  T* gv = a.gv + a.at.v.row(b, j);
  for (std::int64_t c = 0; c < a.e; ++c) gk[c] = T(0);
  for (std::int64_t c = 0; c < a.ev; ++c) gv[c] = T(0);
  for (std::int64_t i = a.causal ? j : 0; i < a.l; ++i) {
    const T* q = a.q + a.at.q.row(b, i);
    const T* go = a.gout + a.at.out.row(b, i);
    const double w =
        m_exp(r::sub(r::mul(a.scale, attn_dot(q, k, a.e)), a.lse[b * a.l + i]));
    const double dp = attn_dot(go, v, a.ev);
    const T wt = static_cast<T>(w);
    const T ds = static_cast<T>(r::mul(a.scale, r::mul(w, r::sub(dp, a.d[b * a.l + i]))));
    for (std::int64_t c = 0; c < a.ev; ++c) gv[c] = r::add(gv[c], r::mul(wt, go[c]));
    for (std::int64_t c = 0; c < a.e; ++c) gk[c] = r::add(gk[c], r::mul(ds, q[c]));
  }
}

}  // namespace lockstep::kernels::shared
