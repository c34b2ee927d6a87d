// Autocast's bf16 rounding on the GPU (see kernels.h): fp32 → bf16-valued fp32 in place or into
// another buffer, and fp32 → bf16 storage for cublasGemmEx's operands. Both round exactly as
// lockstep::round_to_bfloat16 (lockstep/ops/autocast.h) does on the host, by the same bit
// arithmetic, so the CPU emulation and the GPU agree on every operand.
#include <cuda_runtime.h>

#include <cstdint>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/ops/detail/device_math.cuh"
#include "ops/cuda/kernels.h"

namespace lockstep::kernels::cuda {

namespace {

using detail::blocks_for;
using detail::kThreads;

// The upper 16 bits of x rounded to nearest, ties to even; any NaN → 0x7fc0 (c10::BFloat16).
__device__ inline std::uint32_t bf16_bits(float x) {
  const std::uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

__global__ void round_kernel(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = __uint_as_float(bf16_bits(x[i]) << 16);
}

__global__ void cast_kernel(const float* x, std::uint16_t* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = static_cast<std::uint16_t>(bf16_bits(x[i]));
}

}  // namespace

void round_to_bfloat16(const float* x, float* y, std::int64_t n, Exec exec) {
  if (n <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  round_kernel<<<blocks_for(n), kThreads, 0, exec.stream>>>(x, y, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "round_to_bfloat16");
}

void cast_to_bfloat16(const float* x, std::uint16_t* y, std::int64_t n, Exec exec) {
  if (n <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  cast_kernel<<<blocks_for(n), kThreads, 0, exec.stream>>>(x, y, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "cast_to_bfloat16");
}

}  // namespace lockstep::kernels::cuda
