// Internal to the .cu files of src/ops/cuda/: the fixed-order block reduction of the per-row and
// per-channel kernels (one block of kThreads threads per row: layer norm's rows in
// layer_norm.cu), and their launch. The same bits on every run: each thread sums its strided
// slice in index order, then one fixed shared-memory tree adds the partial sums.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/ops/detail/device_math.cuh"
#include "ops/cuda/kernels.h"

namespace lockstep::kernels::cuda::detail {

/// Σ of every thread's `v` over the block (kThreads threads), the same fixed tree every run;
/// every thread gets the total. `s` is kThreads doubles of shared memory.
__device__ inline double block_sum_fixed(double v, double* s) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] = add_rn(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  const double total = s[0];
  __syncthreads();  // s may be reused right after
  return total;
}

/// `blocks` blocks of kThreads threads (one per row); nothing is launched when blocks <= 0.
template <class Kernel, class... Args>
void launch_blocks(const char* name, std::int64_t blocks, Exec exec, Kernel kernel, Args... args) {
  if (blocks <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, exec.stream>>>(args...);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, name);
}

}  // namespace lockstep::kernels::cuda::detail
