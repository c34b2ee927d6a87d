// The fused CPU attention kernels (src/ops/batched_kernels.h): per batch·head slice, the scores
// in one GEMM, the softmax rows in double, the weights kept in a per-task scratch block instead
// of [B, H, L, S] autograd tensors, and the backward recomputing them from the saved
// log-sum-exp. Slices are split over the intra-op team, every GEMM on one thread. The softmax's
// exponentials: float32 on float_math.h's exp (≤ 1 ulp; straight-line code the compiler
// vectorises, as PyTorch's CPU softmax evaluates a vectorised float exp), the max, sum and
// log-sum-exp in double; float64 on the C library's exp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lockstep/core/parallel.h"
#include "ops/batched_kernels.h"
#include "ops/cpu/one_thread.h"
#include "ops/float_math.h"

namespace lockstep::kernels::cpu {

namespace {

// The keys query row i attends: all S, or the first min(i + 1, S) under the causal mask.
std::int64_t keys_of(std::int64_t i, std::int64_t s, bool causal) {
  return causal ? std::min(i + 1, s) : s;
}

inline float softmax_exp(float x) { return shared::exp_f(x); }
inline double softmax_exp(double x) { return std::exp(x); }

// w[i, j] = exp(T(scores[i, j] − lse[i])) for the attended keys, 0 for the masked ones.
template <class T>
void weights_from_lse(T* w, const double* lse, std::int64_t l, std::int64_t s, bool causal) {
  for (std::int64_t i = 0; i < l; ++i) {
    T* row = w + i * s;
    const std::int64_t n = keys_of(i, s, causal);
    const double m = lse[i];
    for (std::int64_t j = 0; j < n; ++j)
      row[j] = softmax_exp(static_cast<T>(static_cast<double>(row[j]) - m));
    std::fill(row + n, row + s, T(0));
  }
}

// One slice's forward (batched_kernels.h); rows of q, k, v, out `rq`, `rk`, `rv`, `ro` elements
// apart; w: L·S + S scratch (the last S: one row's exponentials, summed in order after a loop
// that vectorises).
template <class T>
void forward_slice(std::int64_t l, std::int64_t s, std::int64_t e, std::int64_t ev, const T* q,
                   std::int64_t rq, const T* k, std::int64_t rk, const T* v, std::int64_t rv,
                   double scale, bool causal, T* out, std::int64_t ro, double* lse, T* w) {
  gemm<T>(false, true, l, s, e, static_cast<T>(scale), q, rq, k, rk, T(0), w, s);
  T* ex = w + l * s;
  for (std::int64_t i = 0; i < l; ++i) {
    const T* row = w + i * s;
    const std::int64_t n = keys_of(i, s, causal);
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    for (std::int64_t j = 0; j < n; ++j)
      ex[j] = softmax_exp(static_cast<T>(static_cast<double>(row[j]) - mx));
    double sum = 0;
    for (std::int64_t j = 0; j < n; ++j) sum += static_cast<double>(ex[j]);
    lse[i] = mx + std::log(sum);
  }
  weights_from_lse(w, lse, l, s, causal);
  gemm<T>(false, false, l, ev, s, T(1), w, s, v, rv, T(0), out, ro);
}

// One slice's backward (row strides as forward_slice's; gq, gk, gv as q, k, v; gout as out);
// scratch: 2·L·S.
template <class T>
void backward_slice(std::int64_t l, std::int64_t s, std::int64_t e, std::int64_t ev, const T* q,
                    std::int64_t rq, const T* k, std::int64_t rk, const T* v, std::int64_t rv,
                    const double* lse, const T* gout, std::int64_t ro, double scale, bool causal,
                    T* gq, T* gk, T* gv, T* scratch) {
  T* w = scratch;
  T* dw = scratch + l * s;
  gemm<T>(false, true, l, s, e, static_cast<T>(scale), q, rq, k, rk, T(0), w, s);
  weights_from_lse(w, lse, l, s, causal);
  gemm<T>(true, false, s, ev, l, T(1), w, s, gout, ro, T(0), gv, rv);  // gv = wᵀ·gout
  gemm<T>(false, true, l, s, ev, T(1), gout, ro, v, rv, T(0), dw, s);  // dw = gout·vᵀ
  for (std::int64_t i = 0; i < l; ++i) {  // ds = w ⊙ (dw − Σ_j w·dw), into dw
    const T* wr = w + i * s;
    T* dr = dw + i * s;
    double dot = 0;
    for (std::int64_t j = 0; j < s; ++j) dot += static_cast<double>(wr[j]) * dr[j];
    for (std::int64_t j = 0; j < s; ++j)
      dr[j] = static_cast<T>(static_cast<double>(wr[j]) * (static_cast<double>(dr[j]) - dot));
  }
  // gq = scale·ds·k, gk = scale·dsᵀ·q
  const T sc = static_cast<T>(scale);
  gemm<T>(false, false, l, e, s, sc, dw, s, k, rk, T(0), gq, rq);
  gemm<T>(true, false, s, e, l, sc, dw, s, q, rq, T(0), gk, rk);
}

// Below this many multiply-adds in all the slices run on the calling thread.
constexpr std::int64_t kAttentionParallelMacs = std::int64_t(1) << 18;

// body(lo, hi, scratch) over slices [lo, hi), on the team in contiguous ranges when large
// enough, each range under OneThread with its own scratch of `scratch_elems`.
template <class T, class Body>
void for_slices(std::int64_t batch, std::int64_t macs, std::int64_t scratch_elems, Body body) {
  auto range = [&](std::int64_t lo, std::int64_t hi) {
    OneThread one;
    std::vector<T> scratch(static_cast<std::size_t>(scratch_elems));
    body(lo, hi, scratch.data());
  };
  const int parts = static_cast<int>(std::min<std::int64_t>(get_num_threads(), batch));
  if (parts <= 1 || macs < kAttentionParallelMacs) return range(0, batch);
  parallel_run(parts, [&](int t) { range(batch * t / parts, batch * (t + 1) / parts); });
}

}  // namespace

template <class T>
void attention_forward(std::int64_t batch, std::int64_t l, std::int64_t s, std::int64_t e,
                       std::int64_t ev, const AttentionLayouts& at, const T* q, const T* k,
                       const T* v, double scale, bool causal, T* out, double* lse) {
  for_slices<T>(batch, batch * l * s * (e + ev), l * s + s,
                [&](std::int64_t lo, std::int64_t hi, T* w) {
                  for (std::int64_t b = lo; b < hi; ++b)
                    forward_slice<T>(l, s, e, ev, q + at.q.offset(b), at.q.row_stride,
                                     k + at.k.offset(b), at.k.row_stride, v + at.v.offset(b),
                                     at.v.row_stride, scale, causal, out + at.out.offset(b),
                                     at.out.row_stride, lse + b * l, w);
                });
}

template <class T>
void attention_backward(std::int64_t batch, std::int64_t l, std::int64_t s, std::int64_t e,
                        std::int64_t ev, const AttentionLayouts& at, const T* q, const T* k,
                        const T* v, const double* lse, const T* gout, double scale, bool causal,
                        T* gq, T* gk, T* gv) {
  for_slices<T>(batch, 2 * batch * l * s * (e + ev), 2 * l * s,
                [&](std::int64_t lo, std::int64_t hi, T* scratch) {
                  for (std::int64_t b = lo; b < hi; ++b) {
                    const std::int64_t oq = at.q.offset(b), ok = at.k.offset(b),
                                       ov = at.v.offset(b);
                    backward_slice<T>(l, s, e, ev, q + oq, at.q.row_stride, k + ok,
                                      at.k.row_stride, v + ov, at.v.row_stride, lse + b * l,
                                      gout + at.out.offset(b), at.out.row_stride, scale, causal,
                                      gq + oq, gk + ok, gv + ov, scratch);
                  }
                });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void attention_forward<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,       \
                                     std::int64_t, const AttentionLayouts&, const T*, const T*,    \
                                     const T*, double, bool, T*, double*);                         \
  template void attention_backward<T>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,      \
                                      std::int64_t, const AttentionLayouts&, const T*, const T*,   \
                                      const T*, const double*, const T*, double, bool, T*, T*, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cpu
