// The nccl group's bfloat16 conversions (bf16_wire.h): one grid-stride kernel each way.
#include "dist/nccl/bf16_wire.h"

#include <algorithm>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/cuda/runtime.h"

namespace lockstep::dist::nccl_detail {

namespace {

constexpr int kWireThreads = 256;

unsigned wire_blocks(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + kWireThreads - 1) / kWireThreads, 4096));
}

// dist::to_bfloat16_bits (src/dist/work.cpp) on the device.
__global__ void to_bfloat16_kernel(const float* x, std::uint16_t* bits, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    std::uint32_t u = __float_as_uint(x[i]);
    if ((u & 0x7fffffffu) > 0x7f800000u)
      bits[i] = static_cast<std::uint16_t>((u >> 16) | 0x40u);
    else
      bits[i] = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

__global__ void from_bfloat16_kernel(const std::uint16_t* bits, float* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = __uint_as_float(static_cast<std::uint32_t>(bits[i]) << 16);
}

}  // namespace

void to_bfloat16(const float* x, std::uint16_t* bits, std::int64_t n, int device,
                 cudaStream_t stream) {
  if (n <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(device);
  to_bfloat16_kernel<<<wire_blocks(n), kWireThreads, 0, stream>>>(x, bits, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH(device, "to_bfloat16 (nccl bfloat16 wire format)");
}

void from_bfloat16(const std::uint16_t* bits, float* y, std::int64_t n, int device,
                   cudaStream_t stream) {
  if (n <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(device);
  from_bfloat16_kernel<<<wire_blocks(n), kWireThreads, 0, stream>>>(bits, y, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH(device, "from_bfloat16 (nccl bfloat16 wire format)");
}

}  // namespace lockstep::dist::nccl_detail
