// Fused optimizer steps: SGD over a flat parameter buffer (CPU: src/optim/sgd.cpp) and Adam/AdamW
// over one parameter (CPU: src/optim/adam.cpp); see kernels.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda/check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/kernels.h"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// The segment holding element i: the last s with offsets[s] <= i (empty segments are skipped
// because their start equals the next one's).
__device__ inline std::int64_t segment_of(const std::int64_t* offsets, std::int64_t segments,
                                          std::int64_t i) {
  std::int64_t lo = 0, hi = segments - 1;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Round-to-nearest operations that nvcc may not fuse into an FMA, so each step rounds as the
// CPU loop's separate operations do.
using detail::add_rn;
using detail::div_rn;
using detail::mul_rn;
using detail::sqrt_rn;
using detail::sub_rn;

// The same expressions, in the same order and type, as sgd_update<T> in src/optim/sgd.cpp.
template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, std::int64_t numel,
                           const std::int64_t* offsets, const std::uint8_t* flags,
                           std::int64_t segments, T wd, T mom, T damp, T neg_lr,
                           bool use_wd, bool use_mom, bool nesterov) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::uint8_t f = flags[segment_of(offsets, segments, i)];
    if (!(f & kHasGrad)) continue;  // no gradient: untouched, no state created
    T d = g[i];
    if (use_wd) d = add_rn(d, mul_rn(wd, p[i]));
    if (use_mom) {
      const bool first = !(f & kHasMomentumBuf);
      const T b = first ? d : add_rn(mul_rn(buf[i], mom), mul_rn(damp, d));
      buf[i] = b;
      d = nesterov ? add_rn(d, mul_rn(mom, b)) : b;
    }
    p[i] = add_rn(p[i], mul_rn(neg_lr, d));
  }
}

__global__ void sgd_mark_kernel(std::uint8_t* flags, std::int64_t segments) {
  for (std::int64_t s = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; s < segments;
       s += std::int64_t{gridDim.x} * blockDim.x)
    if (flags[s] & kHasGrad) flags[s] |= kHasMomentumBuf;
}

// The same expressions, in the same order and type, as adam_update<T> in src/optim/adam.cpp.
template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, std::int64_t n, T b1, T b2, T one_b1,
                            T one_b2, T step_size, T bc2_sqrt, T eps, T wd, T decay, bool decoupled,
                            bool use_wd) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    T gi = g[i];
    T pi = p[i];
    if (decoupled)
      pi = mul_rn(pi, decay);
    else if (use_wd)
      gi = add_rn(gi, mul_rn(wd, pi));
    const T mi = add_rn(mul_rn(m[i], b1), mul_rn(one_b1, gi));
    const T vi = add_rn(mul_rn(v[i], b2), mul_rn(mul_rn(one_b2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const T denom = add_rn(div_rn(sqrt_rn(vi), bc2_sqrt), eps);
    p[i] = sub_rn(pi, mul_rn(step_size, div_rn(mi, denom)));
  }
}

__global__ void segment_meta_kernel(std::int64_t* offsets, std::uint8_t* flags, std::int64_t numel,
                                    std::uint8_t flag) {
  offsets[0] = 0;
  offsets[1] = numel;
  flags[0] = flag;
}

}  // namespace

void write_segment_meta(std::int64_t* offsets, std::uint8_t* flags, std::int64_t numel,
                        std::uint8_t flag, Exec exec) {
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  segment_meta_kernel<<<1, 1, 0, exec.stream>>>(offsets, flags, numel, flag);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "write_segment_meta");
}

template <class T>
void adam_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, std::int64_t numel,
               const AdamHyper& h, Exec exec) {
  if (numel <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  // Host-side constants exactly as adam_update<T> (src/optim/adam.cpp) computes them.
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T one_b1 = static_cast<T>(1 - h.beta1), one_b2 = static_cast<T>(1 - h.beta2);
  const double bc1 = 1 - std::pow(h.beta1, h.step), bc2 = 1 - std::pow(h.beta2, h.step);
  const T step_size = static_cast<T>(h.lr / bc1);
  const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T eps = static_cast<T>(h.eps), wd = static_cast<T>(h.weight_decay);
  const T decay = static_cast<T>(1 - h.lr * h.weight_decay);
  const auto blocks =
      static_cast<unsigned>(std::min<std::int64_t>((numel + kThreads - 1) / kThreads, 65535 * 8));
  adam_kernel<T><<<blocks, kThreads, 0, exec.stream>>>(param, grad, exp_avg, exp_avg_sq, numel, b1,
                                                       b2, one_b1, one_b2, step_size, bc2_sqrt, eps,
                                                       wd, decay, h.decoupled, h.weight_decay != 0);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "adam_step");
}

template <class T>
void sgd_step(T* param, const T* grad, T* momentum_buf, std::int64_t numel,
              const std::int64_t* offsets, std::uint8_t* flags, std::int64_t segments,
              const SgdHyper& h, Exec exec) {
  if (numel <= 0 || segments <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  const bool use_mom = h.momentum != 0;
  if (use_mom && !momentum_buf)
    throw ValueError("cuda sgd_step: momentum " + std::to_string(h.momentum) +
                     " needs a momentum buffer, got nullptr");
  const auto blocks =
      static_cast<unsigned>(std::min<std::int64_t>((numel + kThreads - 1) / kThreads, 65535 * 8));
  sgd_kernel<T><<<blocks, kThreads, 0, exec.stream>>>(
      param, grad, momentum_buf, numel, offsets, flags, segments,
      static_cast<T>(h.weight_decay), static_cast<T>(h.momentum),
      static_cast<T>(1.0 - h.dampening), static_cast<T>(-h.lr), h.weight_decay != 0, use_mom,
      h.nesterov);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "sgd_step");
  if (use_mom) {
    const auto mark_blocks = static_cast<unsigned>(
        std::min<std::int64_t>((segments + kThreads - 1) / kThreads, 65535));
    sgd_mark_kernel<<<mark_blocks, kThreads, 0, exec.stream>>>(flags, segments);
    LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "sgd_step (mark momentum buffers)");
  }
}

template void sgd_step<float>(float*, const float*, float*, std::int64_t, const std::int64_t*,
                              std::uint8_t*, std::int64_t, const SgdHyper&, Exec);
template void sgd_step<double>(double*, const double*, double*, std::int64_t,
                               const std::int64_t*, std::uint8_t*, std::int64_t,
                               const SgdHyper&, Exec);

template void adam_step<float>(float*, const float*, float*, float*, std::int64_t, const AdamHyper&,
                               Exec);
template void adam_step<double>(double*, const double*, double*, double*, std::int64_t,
                                const AdamHyper&, Exec);

}  // namespace lockstep::kernels::cuda
