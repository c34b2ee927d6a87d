// Internal: the per-element update formulas of SGD and Adam/AdamW, written once and used by every
// implementation, so they cannot drift apart:
//   - the CPU loops (src/optim/sgd.cpp, src/optim/adam.cpp),
//   - the per-parameter CUDA kernels and the flat-buffer CUDA kernels (src/ops/cuda/optim.cu).
// Each element's update is the same sequence of operations in T (float or double), in the order
// written below. On the GPU every operation is a round-to-nearest intrinsic (__fadd_rn, ...) that
// nvcc never fuses into an FMA, so it rounds exactly as the CPU's separate operations do (x86-64
// has no FMA contraction without -march; a host compiler that contracts a·b + c into an FMA would
// contract the same expressions in every CPU loop alike). The step's scalars (SgdScalars,
// AdamScalars) are computed on the host, in double and then converted to T, by one function each.
//
// Formulas: torch.optim.SGD and torch.optim.Adam / AdamW (PyTorch 1.13 documentation, the
// single-tensor implementations); see include/lockstep/optim/sgd.h and adam.h. In src/ops/, the
// lowest layer that uses them (the fused optimizer kernels), so that ops need not include optim
// (docs/design.md, "Layers"); the namespace is still optim::rules.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#include "lockstep/ops/detail/device_math.cuh"
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif

namespace lockstep::optim::rules {

// ---- arithmetic: one rounding per operation ---------------------------------------------------

#if defined(__CUDA_ARCH__)
// nvcc's device pass: the round-to-nearest intrinsics of include/lockstep/ops/detail/device_math.cuh.
template <class T>
__device__ inline T add(T a, T b) {
  return kernels::cuda::detail::add_rn(a, b);
}
template <class T>
__device__ inline T sub(T a, T b) {
  return kernels::cuda::detail::sub_rn(a, b);
}
template <class T>
__device__ inline T mul(T a, T b) {
  return kernels::cuda::detail::mul_rn(a, b);
}
template <class T>
__device__ inline T div(T a, T b) {
  return kernels::cuda::detail::div_rn(a, b);
}
template <class T>
__device__ inline T sqrt(T a) {
  return kernels::cuda::detail::sqrt_rn(a);
}
#else
// The library is built with -fno-math-errno, so std::sqrt is the (vector) square root
// instruction: correctly rounded, as __fsqrt_rn / __dsqrt_rn.
template <class T>
inline T add(T a, T b) {
  return a + b;
}
template <class T>
inline T sub(T a, T b) {
  return a - b;
}
template <class T>
inline T mul(T a, T b) {
  return a * b;
}
template <class T>
inline T div(T a, T b) {
  return a / b;
}
template <class T>
inline T sqrt(T a) {
  return std::sqrt(a);
}
#endif

// ---- SGD ---------------------------------------------------------------------------------------

/// The scalars of one SGD step, in T. use_wd / use_mom test the double hyper-parameters (a
/// weight decay too small for float still counts as one, as on the CPU).
template <class T>
struct SgdScalars {
  T wd, mom, damp, neg_lr;  // weight_decay, momentum, 1 − dampening, −lr
  bool use_wd, use_mom, nesterov;
};

template <class T>
inline SgdScalars<T> sgd_scalars(double lr, double momentum, double dampening, double weight_decay,
                                 bool nesterov) {
  return {static_cast<T>(weight_decay),
          static_cast<T>(momentum),
          static_cast<T>(1.0 - dampening),
          static_cast<T>(-lr),
          weight_decay != 0,
          momentum != 0,
          nesterov};
}

/// One element of torch.optim.SGD; returns the new parameter value:
///   d = g + wd·p                                  (when weight_decay ≠ 0)
///   b = d (first: no momentum buffer yet) or b·momentum + (1 − dampening)·d;  *buf = b
///   d = d + momentum·b (nesterov) or b            (when momentum ≠ 0)
///   p + (−lr)·d
/// `buf` is read only when momentum ≠ 0 and !first, written only when momentum ≠ 0.
template <class T>
LOCKSTEP_HOST_DEVICE inline T sgd_element(T p, T g, T* buf, bool first, const SgdScalars<T>& s) {
  T d = g;
  if (s.use_wd) d = add(d, mul(s.wd, p));
  if (s.use_mom) {
    const T b = first ? d : add(mul(*buf, s.mom), mul(s.damp, d));
    *buf = b;
    d = s.nesterov ? add(d, mul(s.mom, b)) : b;
  }
  return add(p, mul(s.neg_lr, d));
}

// ---- Adam / AdamW ------------------------------------------------------------------------------

/// The scalars of one Adam/AdamW step of a parameter at step number `step` (1-based, after this
/// update), in T; step_size and bc2_sqrt depend on the step, the others do not.
template <class T>
struct AdamScalars {
  T b1, b2, one_b1, one_b2;  // beta1, beta2, 1 − beta1, 1 − beta2
  T step_size;               // lr / (1 − beta1^step)
  T bc2_sqrt;                // sqrt(1 − beta2^step)
  T eps, wd, decay;          // eps, weight_decay, 1 − lr·weight_decay (AdamW)
  bool decoupled, use_wd;    // AdamW; weight_decay ≠ 0
};

template <class T>
inline AdamScalars<T> adam_scalars(double lr, double beta1, double beta2, double eps,
                                   double weight_decay, double step, bool decoupled) {
  const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
  return {static_cast<T>(beta1),
          static_cast<T>(beta2),
          static_cast<T>(1 - beta1),
          static_cast<T>(1 - beta2),
          static_cast<T>(lr / bc1),
          static_cast<T>(std::sqrt(bc2)),
          static_cast<T>(eps),
          static_cast<T>(weight_decay),
          static_cast<T>(1 - lr * weight_decay),
          decoupled,
          weight_decay != 0};
}

/// One element of torch.optim.Adam (decoupled: AdamW); m and v are updated in place, the new
/// parameter value is returned:
///   p = p·(1 − lr·wd) (AdamW)   or   g = g + wd·p (Adam, when weight_decay ≠ 0)
///   m = m·beta1 + (1 − beta1)·g;   v = v·beta2 + ((1 − beta2)·g)·g
///   p − step_size·(m / (sqrt(v) / bc2_sqrt + eps))
template <class T>
LOCKSTEP_HOST_DEVICE inline T adam_element(T p, T g, T& m, T& v, const AdamScalars<T>& s) {
  if (s.decoupled)
    p = mul(p, s.decay);
  else if (s.use_wd)
    g = add(g, mul(s.wd, p));
  m = add(mul(m, s.b1), mul(s.one_b1, g));
  v = add(mul(v, s.b2), mul(mul(s.one_b2, g), g));
  const T denom = add(div(sqrt(v), s.bc2_sqrt), s.eps);
  return sub(p, mul(s.step_size, div(m, denom)));
}

}  // namespace lockstep::optim::rules
