// Internal to the .cu files of src/ops/cuda/: one grid-stride launch over n items on an Exec's
// device and stream, checked under the kernel's name; nothing is launched when n <= 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/ops/detail/device_math.cuh"
#include "ops/cuda/kernels.h"

namespace lockstep::kernels::cuda::detail {

/// The grid-stride loop of the kernels below: i = this thread's first item, then + grid size.
#define LOCKSTEP_GRID_STRIDE(i, n)                                                    \
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += std::int64_t{gridDim.x} * blockDim.x)

template <class Kernel, class... Args>
void launch_n(const char* name, std::int64_t n, Exec exec, Kernel kernel, Args... args) {
  if (n <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  kernel<<<blocks_for(n), kThreads, 0, exec.stream>>>(args...);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, name);
}

/// One block of kThreads threads (the fixed-order block reductions).
template <class Kernel, class... Args>
void launch_one_block(const char* name, Exec exec, Kernel kernel, Args... args) {
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  kernel<<<1, kThreads, 0, exec.stream>>>(args...);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, name);
}

}  // namespace lockstep::kernels::cuda::detail
