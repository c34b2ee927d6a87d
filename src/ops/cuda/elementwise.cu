// Elementwise kernels and the bias-gradient column sum (see kernels.h).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/check.h"
#include "ops/cuda/kernels.h"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kThreads = 256;

// Grid-stride loops: the grid is capped, every element is visited once whatever the size.
inline unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 65535 * 8));
}

template <class T>
__global__ void add_kernel(const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = a[i] + b[i];
}

template <class T>
__global__ void mul_kernel(const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = a[i] * b[i];
}

template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const T v = x[i];
    y[i] = v > T(0) || v != v ? v : T(0);  // NaN propagates, as torch.relu
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* g, const T* y, T* gi, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    gi[i] = y[i] > T(0) ? g[i] : T(0);
}

// One thread per column; consecutive threads read consecutive addresses of each row.
template <class T>
__global__ void bias_grad_kernel(const T* grad, T* out, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t j = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; j < cols;
       j += std::int64_t{gridDim.x} * blockDim.x) {
    T acc = T(0);
    for (std::int64_t i = 0; i < rows; ++i) acc += grad[i * cols + j];
    out[j] = acc;
  }
}

}  // namespace

// One grid-stride launch over n items on exec's device and stream, checked under `name`.
template <class Kernel, class... Args>
void launch(const char* name, std::int64_t n, Exec exec, Kernel kernel, Args... args) {
  if (n <= 0) return;
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  kernel<<<blocks_for(n), kThreads, 0, exec.stream>>>(args...);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, name);
}

template <class T>
void add(const T* a, const T* b, T* out, std::int64_t n, Exec exec) {
  launch("add", n, exec, add_kernel<T>, a, b, out, n);
}

template <class T>
void mul(const T* a, const T* b, T* out, std::int64_t n, Exec exec) {
  launch("mul", n, exec, mul_kernel<T>, a, b, out, n);
}

template <class T>
void relu_forward(const T* x, T* y, std::int64_t n, Exec exec) {
  launch("relu_forward", n, exec, relu_forward_kernel<T>, x, y, n);
}

template <class T>
void relu_backward(const T* grad_out, const T* y, T* grad_in, std::int64_t n, Exec exec) {
  launch("relu_backward", n, exec, relu_backward_kernel<T>, grad_out, y, grad_in, n);
}

template <class T>
void bias_grad(const T* grad, T* out, std::int64_t rows, std::int64_t cols, Exec exec) {
  launch("bias_grad", cols, exec, bias_grad_kernel<T>, grad, out, rows, cols);
}

#define LOCKSTEP_INSTANTIATE(T)                                                        \
  template void add<T>(const T*, const T*, T*, std::int64_t, Exec);                    \
  template void mul<T>(const T*, const T*, T*, std::int64_t, Exec);                    \
  template void relu_forward<T>(const T*, T*, std::int64_t, Exec);                     \
  template void relu_backward<T>(const T*, const T*, T*, std::int64_t, Exec);          \
  template void bias_grad<T>(const T*, T*, std::int64_t, std::int64_t, Exec);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cuda
