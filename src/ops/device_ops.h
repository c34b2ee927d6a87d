// Internal: the per-element and per-line bodies of the ops that have a CUDA path beyond the
// reference workload, written ONCE for the host and the GPU (plain C++17, __host__ __device__
// under nvcc), so the CUDA kernels (src/ops/cuda/) run the same expressions as the CPU ops:
//   - StridedIter / ReducePlan: an iteration space of up to 8 dimensions with two operands'
//     element strides (broadcasting, strided copies, reductions); built on the host by
//     src/ops/strided_plan.h, walked by strided_offsets / reduce_sum_one;
//   - the elementwise formulas of exp, log, sqrt, pow, sigmoid, gelu (exact and tanh) and their
//     backward (the CPU ops' expressions of src/ops/elementwise.cpp, operation by operation; the
//     GELU's CPU op calls these bodies itself; the exact GELU in float32 on float_math.h's
//     library-free exp and Φ, the same bits on the GPU as on the CPU);
//   - the comparisons (eq, ne, lt, le, gt, ge) of two elements;
//   - softmax / log_softmax of one line, max / argmax of one line along a dimension, and the
//     order-independent accumulator of the whole-tensor max / argmax (src/ops/reduce.cpp).
// Arithmetic goes through optim::rules::add/sub/mul/div (round-to-nearest intrinsics on the GPU,
// which nvcc never fuses into an FMA; plain operators on the host). The transcendental functions
// are the C library's on the host (bit for bit the CPU ops) and CUDA's on the GPU (within the
// few ulp the CUDA C Programming Guide, "Mathematical Functions", states; sqrt is exact).
// tests/ops/device_ops_test.cpp runs these bodies on the host against the CPU ops, bit for bit.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "ops/wrapping.h"
#include "ops/float_math.h"
#include "lockstep/ops/detail/update_rules.h"

namespace lockstep::kernels::shared {

namespace r = ::lockstep::optim::rules;

inline constexpr int kMaxDims = 8;

/// An iteration space sizes[0..nd) (row-major: the last dimension fastest) and, for each of two
/// operands, its element stride along each dimension (0 = broadcast along it). nd == 0 is one
/// element. Every size is ≥ 1 when anything is launched over it.
struct StridedIter {
  int nd = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[2][kMaxDims] = {};
};

/// The two operands' element offsets of linear position i of `it`.
LOCKSTEP_HOST_DEVICE inline void strided_offsets(const StridedIter& it, std::int64_t i,
                                                 std::int64_t& o0, std::int64_t& o1) {
  o0 = 0;
  o1 = 0;
  for (int d = it.nd - 1; d >= 0; --d) {
    const std::int64_t s = it.sizes[d];
    const std::int64_t k = i % s;
    i /= s;
    o0 += k * it.strides[0][d];
    o1 += k * it.strides[1][d];
  }
}

/// torch's comparisons eq, ne, lt, le, gt, ge of two elements as int64 0/1. IEEE rules: a NaN
/// compares false with everything, except ne, which is true.
enum class Compare { Eq, Ne, Lt, Le, Gt, Ge };
template <class T>
LOCKSTEP_HOST_DEVICE inline std::int64_t compare_one(Compare op, T a, T b) {
  switch (op) {
    case Compare::Eq: return a == b;
    case Compare::Ne: return a != b;
    case Compare::Lt: return a < b;
    case Compare::Le: return a <= b;
    case Compare::Gt: return a > b;
    case Compare::Ge: return a >= b;
  }
  return 0;
}

/// A reduction of `in` to `out` (sum_to, sum along a dimension): output element o sums the input
/// elements at kept-offset(o) + reduced-offset(j), j < reduced_count, in increasing j — which is
/// increasing input index, the CPU loops' order. kept walks the output's elements in its
/// row-major order (operand 0: input stride; operand 1 unused); reduced walks the reduced
/// dimensions (operand 0: input stride).
struct ReducePlan {
  StridedIter kept;
  StridedIter reduced;
  std::int64_t out_count = 0;
  std::int64_t reduced_count = 0;
};

/// Σ_j in[kept(o) + reduced(j)] accumulated in Acc (double for float inputs, int64 for int64) in
/// increasing j, as kernels::ref::sum_to and the CPU's sum(dim) do.
template <class T, class Acc>
LOCKSTEP_HOST_DEVICE inline Acc reduce_sum_one(const T* in, const ReducePlan& p, std::int64_t o) {
  std::int64_t base = 0, unused = 0;
  strided_offsets(p.kept, o, base, unused);
  const StridedIter& it = p.reduced;
  std::int64_t idx[kMaxDims] = {};
  std::int64_t off = 0;
  Acc acc = 0;
  for (std::int64_t j = 0; j < p.reduced_count; ++j) {
    acc = ::lockstep::detail::wrapping_add(acc, static_cast<Acc>(in[base + off]));  // int64 wraps
    for (int d = it.nd - 1; d >= 0; --d) {  // odometer step to j + 1
      off += it.strides[0][d];
      if (++idx[d] < it.sizes[d]) break;
      off -= it.strides[0][d] * it.sizes[d];
      idx[d] = 0;
    }
  }
  return acc;
}

// ---- math functions: the C library on the host, CUDA's on the device ---------------------------

LOCKSTEP_HOST_DEVICE inline float m_exp(float x) { return ::expf(x); }
LOCKSTEP_HOST_DEVICE inline double m_exp(double x) { return ::exp(x); }
LOCKSTEP_HOST_DEVICE inline float m_log(float x) { return ::logf(x); }
LOCKSTEP_HOST_DEVICE inline double m_log(double x) { return ::log(x); }
LOCKSTEP_HOST_DEVICE inline double m_pow(double x, double p) { return ::pow(x, p); }
LOCKSTEP_HOST_DEVICE inline double m_erf(double x) { return ::erf(x); }
LOCKSTEP_HOST_DEVICE inline double m_tanh(double x) { return ::tanh(x); }

template <class T>
LOCKSTEP_HOST_DEVICE inline bool is_nan(T v) {
  return v != v;  // false for int64
}

// std::numbers::sqrt2 and inv_sqrtpi (C++20, not available to the C++17 .cu files): the same
// literals, so the same doubles.
inline constexpr double kSqrt2 = 1.414213562373095048801688724209698079;
inline constexpr double kInvSqrtPi = 0.564189583547756286948079451560772586;
inline constexpr double kInvSqrt2 = 1.0 / kSqrt2;  // the CPU's (1.0 / std::numbers::sqrt2)
// The tanh GELU's constants as PyTorch's (aten/src/ATen/native/cpu/Activation.cpp):
// kBeta = M_SQRT2 · M_2_SQRTPI · 0.5 = √(2/π), kKappa = 0.044715.
inline constexpr double kGeluBeta = kSqrt2 * (2.0 * kInvSqrtPi) * 0.5;
inline constexpr double kGeluKappa = 0.044715;

// ---- elementwise forward (src/ops/elementwise.cpp) ---------------------------------------------

template <class T>
LOCKSTEP_HOST_DEVICE inline T exp_fwd(T x) {
  return m_exp(x);
}
template <class T>
LOCKSTEP_HOST_DEVICE inline T log_fwd(T x) {
  return m_log(x);
}
template <class T>
LOCKSTEP_HOST_DEVICE inline T sqrt_fwd(T x) {
  return r::sqrt(x);
}
/// T(std::pow(x, p)): the power taken in double (std::pow(float, double) promotes).
template <class T>
LOCKSTEP_HOST_DEVICE inline T pow_fwd(T x, double p) {
  return static_cast<T>(m_pow(static_cast<double>(x), p));
}
/// 1 / (1 + exp(−x)) in T.
template <class T>
LOCKSTEP_HOST_DEVICE inline T sigmoid_fwd(T x) {
  return r::div(T(1), r::add(T(1), m_exp(-x)));
}
/// x·Φ(x), Φ(x) = 0.5·(1 + erf(x/√2)) (torch gelu, approximate='none'): float32 in float with
/// float_math.h's Φ (straight-line code: the CPU loop vectorises, as PyTorch's CPU kernel
/// evaluates a vectorised float erf); float64 in double with the C library's erf.
template <class T>
LOCKSTEP_HOST_DEVICE inline T gelu_fwd(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return r::mul(x, normal_cdf_f(x));
  } else {
    const double xd = static_cast<double>(x);
    return static_cast<T>(r::mul(r::mul(0.5, xd), r::add(1.0, m_erf(r::mul(xd, kInvSqrt2)))));
  }
}

/// The tanh GELU 0.5·x·(1 + tanh(β·(x + κ·x³))) (torch gelu, approximate='tanh'; PyTorch's
/// expression, operation by operation) in double, rounded to T. The CPU op calls this itself.
template <class T>
LOCKSTEP_HOST_DEVICE inline T gelu_tanh_fwd(T x) {
  const double xd = static_cast<double>(x);
  const double x_cube = r::mul(r::mul(xd, xd), xd);
  const double inner = r::mul(kGeluBeta, r::add(xd, r::mul(kGeluKappa, x_cube)));
  return static_cast<T>(r::mul(r::mul(0.5, xd), r::add(1.0, m_tanh(inner))));
}

// ---- elementwise backward ---------------------------------------------------------------------

/// 0 when p == 0, else T(g·p·pow(x, p − 1)) in double.
template <class T>
LOCKSTEP_HOST_DEVICE inline T pow_bwd(T g, T x, double p) {
  if (p == 0) return T(0);
  return static_cast<T>(
      r::mul(r::mul(static_cast<double>(g), p), m_pow(static_cast<double>(x), r::sub(p, 1.0))));
}
/// g / (y + y), y = sqrt(x).
template <class T>
LOCKSTEP_HOST_DEVICE inline T sqrt_bwd(T g, T y) {
  return r::div(g, r::add(y, y));
}
/// g·y·(1 − y), y = sigmoid(x).
template <class T>
LOCKSTEP_HOST_DEVICE inline T sigmoid_bwd(T g, T y) {
  return r::mul(r::mul(g, y), r::sub(T(1), y));
}
/// g·(Φ(x) + x·φ(x)), φ(x) = exp(−x²/2)/√(2π): float32 in float (float_math.h's Φ and exp, as
/// PyTorch's CPU GeluBackward: φ = exp((−0.5·x)·x)·β); float64 in double with the C library,
/// φ = exp(−x²/2)·0.5·(1/√π)·√2.
template <class T>
LOCKSTEP_HOST_DEVICE inline T gelu_bwd(T g, T x) {
  if constexpr (std::is_same_v<T, float>) {
    const float pdf = r::mul(exp_f(r::mul(r::mul(-0.5f, x), x)), 0.398942292f);
    return r::mul(g, r::add(normal_cdf_f(x), r::mul(x, pdf)));
  } else {
    const double xd = static_cast<double>(x);
    const double cdf = r::mul(0.5, r::add(1.0, m_erf(r::mul(xd, kInvSqrt2))));
    const double pdf =
        r::mul(r::mul(r::mul(m_exp(r::mul(r::mul(-0.5, xd), xd)), 0.5), kInvSqrtPi), kSqrt2);
    return static_cast<T>(r::mul(static_cast<double>(g), r::add(cdf, r::mul(xd, pdf))));
  }
}

/// The tanh GELU's derivative times g in double, as PyTorch's GeluBackward (tanh branch):
/// t = tanh(β·(x + κ·x³)), g·(0.5·(1 + t) + 0.5·x·(1 − t²)·β·(1 + 3κ·x²)).
template <class T>
LOCKSTEP_HOST_DEVICE inline T gelu_tanh_bwd(T g, T x) {
  const double xd = static_cast<double>(x);
  const double x_sq = r::mul(xd, xd);
  const double x_cube = r::mul(x_sq, xd);
  const double inner = r::mul(kGeluBeta, r::add(xd, r::mul(kGeluKappa, x_cube)));
  const double t = m_tanh(inner);
  const double left = r::mul(0.5, xd), right = r::add(1.0, t);
  const double left_derivative = r::mul(0.5, right);
  const double tanh_derivative = r::sub(1.0, r::mul(t, t));
  const double inner_derivative =
      r::mul(kGeluBeta, r::add(1.0, r::mul(r::mul(3.0, kGeluKappa), x_sq)));
  const double right_derivative = r::mul(r::mul(left, tanh_derivative), inner_derivative);
  return static_cast<T>(r::mul(static_cast<double>(g), r::add(left_derivative, right_derivative)));
}

// ---- along a dimension: a tensor viewed as [outer, R, inner] -----------------------------------

/// The offset of element 0 of line `line` (< outer·inner; line = o·inner + i) along R.
LOCKSTEP_HOST_DEVICE inline std::int64_t line_base(std::int64_t line, std::int64_t R,
                                                   std::int64_t inner) {
  return (line / inner) * R * inner + line % inner;
}

/// index_select: the input offset of output element e of [outer, k, inner] (input [outer, R,
/// inner]; index[i] in [0, R)).
LOCKSTEP_HOST_DEVICE inline std::int64_t index_select_source(const std::int64_t* index,
                                                             std::int64_t e, std::int64_t R,
                                                             std::int64_t k, std::int64_t inner) {
  const std::int64_t j = e % inner, i = (e / inner) % k, o = e / (inner * k);
  return (o * R + index[i]) * inner + j;
}

/// index_select's backward at element e of the input gradient [outer, R, inner]: +0 plus the
/// gradient elements whose index selects this position, in increasing index position, in T (the
/// CPU adds g's slices into zeros one index position after the other).
template <class T>
LOCKSTEP_HOST_DEVICE inline T index_select_grad_one(const T* g, const std::int64_t* index,
                                                    std::int64_t e, std::int64_t R, std::int64_t k,
                                                    std::int64_t inner) {
  const std::int64_t j = e % inner, q = (e / inner) % R, o = e / (inner * R);
  T acc = T(0);
  for (std::int64_t i = 0; i < k; ++i)
    if (index[i] == q) acc = r::add(acc, g[(o * k + i) * inner + j]);
  return acc;
}

/// softmax (or log_softmax) of the line x[base + k·inner], k < R, into y at the same offsets, as
/// src/ops/reduce.cpp: the maximum in double ignoring NaN (std::max(mx, v)), the sum of
/// exp(x − max) in double in order, lse = max + log(sum), y = T(x − lse) or T(exp(x − lse)).
template <class T>
LOCKSTEP_HOST_DEVICE inline void softmax_line(const T* x, T* y, std::int64_t base, std::int64_t R,
                                              std::int64_t inner, bool log) {
  double mx = -HUGE_VAL;
  for (std::int64_t k = 0; k < R; ++k) {
    const double v = static_cast<double>(x[base + k * inner]);
    mx = mx < v ? v : mx;
  }
  double s = 0;
  for (std::int64_t k = 0; k < R; ++k)
    s = r::add(s, m_exp(r::sub(static_cast<double>(x[base + k * inner]), mx)));
  const double lse = r::add(mx, m_log(s));
  for (std::int64_t k = 0; k < R; ++k) {
    const double d = r::sub(static_cast<double>(x[base + k * inner]), lse);
    y[base + k * inner] = static_cast<T>(log ? d : m_exp(d));
  }
}

/// max(dim) of the line x[base + k·inner], k < R (R ≥ 1), as src/ops/reduce.cpp: starting at
/// k = 0, a later element wins when strictly greater (ties: the first index) or when it is the
/// line's first NaN (NaN propagates with the first NaN's index, as torch.max(x, dim)).
template <class T>
LOCKSTEP_HOST_DEVICE inline void max_line(const T* x, std::int64_t base, std::int64_t R,
                                          std::int64_t inner, T& value, std::int64_t& index) {
  std::int64_t best = 0;
  T m = x[base];
  for (std::int64_t k = 1; k < R; ++k) {
    const T v = x[base + k * inner];
    if (v > m || (is_nan(v) && !is_nan(m))) {
      m = v;
      best = k;
    }
  }
  value = m;
  index = best;
}

/// What the whole-tensor max and argmax need, as a reduction that any partition and merge order
/// gives the same: the first and last NaN's index, and the first index of the largest non-NaN
/// value.
struct MaxAcc {
  std::int64_t nan_first = -1;
  std::int64_t nan_last = -1;
  std::int64_t best = -1;
};

template <class T>
LOCKSTEP_HOST_DEVICE inline void max_acc_push(const T* x, MaxAcc& a, std::int64_t i) {
  const T v = x[i];
  if (is_nan(v)) {
    if (i > a.nan_last) a.nan_last = i;
    if (a.nan_first < 0 || i < a.nan_first) a.nan_first = i;
    return;
  }
  if (a.best < 0 || v > x[a.best] || (!(x[a.best] > v) && i < a.best)) a.best = i;
}

template <class T>
LOCKSTEP_HOST_DEVICE inline void max_acc_merge(const T* x, MaxAcc& a, const MaxAcc& b) {
  if (b.nan_last > a.nan_last) a.nan_last = b.nan_last;
  if (b.nan_first >= 0 && (a.nan_first < 0 || b.nan_first < a.nan_first)) a.nan_first = b.nan_first;
  if (b.best < 0) return;
  if (a.best < 0 || x[b.best] > x[a.best] || (!(x[a.best] > x[b.best]) && b.best < a.best))
    a.best = b.best;
}

/// max() of the whole tensor (n ≥ 1) as the CPU's scan `if (v > m || isnan(v)) m = v`: the last
/// NaN if there is one, else the first largest element.
inline constexpr int kRuleMax = 0;
/// argmax() as max(flattened, 0): the first NaN's index if there is one, else the first largest.
inline constexpr int kRuleArgmax = 1;

template <class T>
LOCKSTEP_HOST_DEVICE inline std::int64_t max_acc_index(const T* x, const MaxAcc& a, int rule) {
  if (rule == kRuleMax) return a.nan_last >= 0 ? a.nan_last : a.best;
  return a.nan_first >= 0 ? a.nan_first : a.best < 0 ? 0 : a.best;
}

}  // namespace lockstep::kernels::shared
