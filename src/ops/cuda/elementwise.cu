// Elementwise kernels, fills, the Linear bias helpers and the whole-tensor sum (see kernels.h).
#include <cuda_runtime.h>

#include <algorithm>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/ops/detail/device_math.cuh"
#include "ops/cuda/kernels.h"
#include "lockstep/ops/detail/tree_sum.h"

namespace lockstep::kernels::cuda {

namespace {

using detail::blocks_for;
using detail::kThreads;

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

// The CPU op's expressions (src/ops/elementwise.cpp): NaN and -0.0 pass through the forward;
// the backward is threshold_backward on the result, so a NaN result passes the gradient on.
template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const T v = x[i];
    y[i] = v < T(0) ? T(0) : v;
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* g, const T* y, T* gi, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    gi[i] = y[i] <= T(0) ? T(0) : g[i];
}

template <class T>
__global__ void binary_kernel(Binary op, const T* a, std::int64_t sa, const T* b, std::int64_t sb,
                              T* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    out[i] = detail::binary_rn(op, a[i * sa], b[i * sb]);
}

template <class T>
__global__ void axpy_kernel(T alpha, bool plain, const T* x, std::int64_t sx, T* y,
                            std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const T v = plain ? x[i * sx] : detail::mul_rn(alpha, x[i * sx]);
    y[i] = detail::add_rn(y[i], v);
  }
}

template <class T>
__global__ void scale_kernel(T* x, T value, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    x[i] = detail::mul_rn(x[i], value);
}

template <class T>
__global__ void fill_kernel(T* x, T value, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    x[i] = value;
}

template <class T>
__global__ void unary_kernel(Unary op, const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = op == Unary::Neg ? -x[i] : tanh(x[i]);
}

// gi = g · (1 − y·y), rounded step by step as the CPU's gi * (1 - y * y).
template <class T>
__global__ void tanh_backward_kernel(const T* g, const T* y, T* gi, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    gi[i] = detail::mul_rn(g[i], detail::sub_rn(T(1), detail::mul_rn(y[i], y[i])));
}

template <class T>
__global__ void bias_rows_kernel(const T* bias, T* y, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x)
    y[i] = bias[i % cols];
}

// One block: each thread sums a strided slice in index order (double), then a fixed tree; the
// same bits on every run whatever the device.
template <class T>
__global__ void sum_all_kernel(const T* x, std::int64_t n, double divisor, T* out) {
  __shared__ double s[detail::kThreads];
  double acc = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += detail::kThreads) acc += static_cast<double>(x[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = detail::kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = static_cast<T>(s[0] / divisor);
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

// Deterministic mode's tree (include/lockstep/ops/detail/tree_sum.h), one thread per column: each thread walks
// the shared schedule over its column in place, as tree_sum_columns does on the CPU.
template <class T>
__global__ void tree_sum_rows_kernel(T* base, std::int64_t rows, std::int64_t width) {
  for (std::int64_t j = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; j < width;
       j += std::int64_t{gridDim.x} * blockDim.x)
    ::lockstep::parallel::detail::for_each_tree_pair(rows, [&](std::int64_t dst, std::int64_t src) {
      T* d = base + dst * width + j;
      *d = detail::add_rn(*d, base[src * width + j]);
    });
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

template <class T>
void binary(Binary op, const T* a, std::int64_t sa, const T* b, std::int64_t sb, T* out,
            std::int64_t n, Exec exec) {
  launch("binary", n, exec, binary_kernel<T>, op, a, sa, b, sb, out, n);
}

template <class T>
void axpy(T alpha, const T* x, std::int64_t sx, T* y, std::int64_t n, Exec exec) {
  launch("axpy", n, exec, axpy_kernel<T>, alpha, alpha == T(1), x, sx, y, n);
}

template <class T>
void scale(T* x, T value, std::int64_t n, Exec exec) {
  launch("scale", n, exec, scale_kernel<T>, x, value, n);
}

template <class T>
void fill(T* x, T value, std::int64_t n, Exec exec) {
  launch("fill", n, exec, fill_kernel<T>, x, value, n);
}

template <class T>
void unary(Unary op, const T* x, T* y, std::int64_t n, Exec exec) {
  launch(op == Unary::Neg ? "neg" : "tanh", n, exec, unary_kernel<T>, op, x, y, n);
}

template <class T>
void tanh_backward(const T* grad_out, const T* y, T* grad_in, std::int64_t n, Exec exec) {
  launch("tanh_backward", n, exec, tanh_backward_kernel<T>, grad_out, y, grad_in, n);
}

template <class T>
void bias_rows(const T* bias, T* y, std::int64_t rows, std::int64_t cols, Exec exec) {
  launch("bias_rows", rows * cols, exec, bias_rows_kernel<T>, bias, y, rows, cols);
}

template <class T>
void tree_sum_rows(T* base, std::int64_t rows, std::int64_t width, Exec exec) {
  if (rows <= 1) return;
  launch("tree_sum_rows", width, exec, tree_sum_rows_kernel<T>, base, rows, width);
}

template <class T>
void sum_all(const T* x, std::int64_t n, double divisor, T* out, Exec exec) {
  ::lockstep::cuda::DeviceGuard guard(exec.device);
  sum_all_kernel<T><<<1, kThreads, 0, exec.stream>>>(x, n, divisor, out);
  LOCKSTEP_CUDA_CHECK_LAUNCH(exec.device, "sum_all");
}

#define LOCKSTEP_INSTANTIATE(T)                                                       \
  template void add<T>(const T*, const T*, T*, std::int64_t, Exec);                   \
  template void mul<T>(const T*, const T*, T*, std::int64_t, Exec);                   \
  template void relu_forward<T>(const T*, T*, std::int64_t, Exec);                    \
  template void relu_backward<T>(const T*, const T*, T*, std::int64_t, Exec);         \
  template void bias_grad<T>(const T*, T*, std::int64_t, std::int64_t, Exec);         \
  template void binary<T>(Binary, const T*, std::int64_t, const T*, std::int64_t, T*, \
                          std::int64_t, Exec);                                        \
  template void axpy<T>(T, const T*, std::int64_t, T*, std::int64_t, Exec);           \
  template void scale<T>(T*, T, std::int64_t, Exec);                                  \
  template void unary<T>(Unary, const T*, T*, std::int64_t, Exec);                    \
  template void tanh_backward<T>(const T*, const T*, T*, std::int64_t, Exec);         \
  template void bias_rows<T>(const T*, T*, std::int64_t, std::int64_t, Exec);         \
  template void sum_all<T>(const T*, std::int64_t, double, T*, Exec);                 \
  template void tree_sum_rows<T>(T*, std::int64_t, std::int64_t, Exec);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE
template void fill<float>(float*, float, std::int64_t, Exec);
template void fill<double>(double*, double, std::int64_t, Exec);
template void fill<std::int64_t>(std::int64_t*, std::int64_t, std::int64_t, Exec);

}  // namespace lockstep::kernels::cuda
