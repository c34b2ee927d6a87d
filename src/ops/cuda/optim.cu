// One fused SGD step over a flat parameter buffer (see kernels.h; CPU: src/optim/sgd.cpp).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/check.h"
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

// Round-to-nearest add and multiply that nvcc may not fuse into an FMA, so each step rounds as the
// CPU loop's separate operations do.
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

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

}  // namespace

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

}  // namespace lockstep::kernels::cuda
