// Internal: turning CUDA / cuBLAS / NCCL status codes into typed errors. Used by every file of
// the CUDA backend (.cpp and .cu) in three layers: core (src/cuda/), ops (src/ops/cuda/) and dist
// (src/dist/nccl/), hence a layer interface here, as c10/cuda/CUDAException.h is PyTorch's. It
// includes CUDA headers: only code compiled with CUDA includes it, and no other header does.
//
//   LOCKSTEP_CUDA_CHECK(cudaMalloc(&p, n), device, "cudaMalloc(" + std::to_string(n) + " bytes)");
//   LOCKSTEP_CUDA_CHECK_LAUNCH(device, "relu_forward");   // after a <<<...>>> launch
//
// The message reads "CUDA error on cuda:1 in cudaMalloc(4096 bytes): out of memory
// (cudaErrorMemoryAllocation) [src/cuda/allocator.cpp:88]". device < 0 means "no particular
// device" and prints "cuda".
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "lockstep/core/error.h"

namespace lockstep::cuda {
/// The most CUDA devices the backend's per-device tables (allocator caches, graph registry) hold.
inline constexpr int kMaxDevices = 64;
}  // namespace lockstep::cuda

namespace lockstep::cuda::detail {

inline std::string device_name(int device) {
  return device < 0 ? std::string("cuda") : "cuda:" + std::to_string(device);
}

[[noreturn]] void throw_cuda_error(cudaError_t status, int device, const std::string& op,
                                   const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, int device, const std::string& op,
                                     const char* file, int line);

inline void check_cuda(cudaError_t status, int device, const std::string& op, const char* file,
                       int line) {
  if (status != cudaSuccess) throw_cuda_error(status, device, op, file, line);
}
inline void check_cublas(cublasStatus_t status, int device, const std::string& op,
                         const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, device, op, file, line);
}

/// The device a pointer belongs to (cudaPointerGetAttributes), or -1 when unknown; for messages.
int device_of(const void* ptr) noexcept;

}  // namespace lockstep::cuda::detail

#define LOCKSTEP_CUDA_CHECK(expr, device, op) \
  ::lockstep::cuda::detail::check_cuda((expr), (device), (op), __FILE__, __LINE__)
#define LOCKSTEP_CUBLAS_CHECK(expr, device, op) \
  ::lockstep::cuda::detail::check_cublas((expr), (device), (op), __FILE__, __LINE__)
/// After a kernel launch: a bad configuration (cudaGetLastError) becomes a CudaError naming the
/// kernel. Errors inside the kernel surface at the next synchronizing call.
#define LOCKSTEP_CUDA_CHECK_LAUNCH(device, kernel)                                           \
  ::lockstep::cuda::detail::check_cuda(cudaGetLastError(), (device),                      \
                                       std::string("kernel ") + (kernel), __FILE__, __LINE__)
