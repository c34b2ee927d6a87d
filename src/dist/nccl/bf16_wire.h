// The nccl group's bfloat16 wire format (internal; nccl_async.cpp): float32 values rounded to
// bfloat16 bits and widened back, on a stream of the group's device, with the rounding of
// dist::to_bfloat16_bits (round to nearest even; a NaN stays a quiet NaN) so that the host
// emulation and the GPU round alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lockstep::dist::nccl_detail {

/// bits[i] = the bfloat16 bits of x[i], i < n, enqueued on `stream` of `device`.
void to_bfloat16(const float* x, std::uint16_t* bits, std::int64_t n, int device,
                 cudaStream_t stream);
/// y[i] = bits[i] widened to float32 (exact), i < n, enqueued on `stream` of `device`.
void from_bfloat16(const std::uint16_t* bits, float* y, std::int64_t n, int device,
                   cudaStream_t stream);

}  // namespace lockstep::dist::nccl_detail
