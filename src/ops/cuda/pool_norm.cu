// The CUDA kernels of the pools (src/ops/cuda_pool_norm_ops.h), on the shared bodies of
// src/ops/pool_norm_bodies.h, launched on the device's compute stream: one thread per output
// element (forward) or input element (backward, the gather form: no atomics), grid-stride over
// all planes; bit for bit the fast CPU kernels. Batch norm's kernels: src/ops/cuda/batch_norm.cu.
#include <cuda_runtime.h>

#include "lockstep/cuda/detail/check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda_pool_norm_ops.h"

namespace lockstep::cuda_pool_norm {

namespace {

namespace sh = ::lockstep::kernels::shared;
namespace kd = ::lockstep::kernels::cuda::detail;
using kd::kThreads;
using ::lockstep::kernels::cuda::Exec;
using ::lockstep::kernels::cuda::on_device;

// ---- pools ------------------------------------------------------------------------------------

template <class T>
__global__ void max_pool_kernel(const T* x, T* y, std::int64_t* index, PoolGeom g, std::int64_t n) {
  const std::int64_t op = g.out_h * g.out_w;
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t p = i / op, r = i - p * op;
    sh::max_pool_one(x + p * g.in_h * g.in_w, g, r / g.out_w, r % g.out_w, y + i, index + i);
  }
}
template <class T>
__global__ void max_pool_backward_kernel(const T* gy, const std::int64_t* index, T* gx, PoolGeom g,
                                         std::int64_t n) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t p = i / ip, r = i - p * ip;
    gx[i] = sh::max_pool_grad_one(gy + p * op, index + p * op, g, r / g.in_w, r % g.in_w);
  }
}
template <class T>
__global__ void avg_pool_kernel(const T* x, T* y, PoolGeom g, std::int64_t n) {
  const std::int64_t op = g.out_h * g.out_w;
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t p = i / op, r = i - p * op;
    y[i] = sh::avg_pool_one(x + p * g.in_h * g.in_w, g, r / g.out_w, r % g.out_w);
  }
}
template <class T>
__global__ void avg_pool_backward_kernel(const T* gy, T* gx, PoolGeom g, std::int64_t n) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t p = i / ip, r = i - p * ip;
    gx[i] = sh::avg_pool_grad_one(gy + p * op, g, r / g.in_w, r % g.in_w);
  }
}
template <class T>
__global__ void adaptive_avg_kernel(const T* x, T* y, PoolGeom g, std::int64_t n) {
  const std::int64_t op = g.out_h * g.out_w;
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t p = i / op, r = i - p * op;
    y[i] = sh::adaptive_avg_one(x + p * g.in_h * g.in_w, g, r / g.out_w, r % g.out_w);
  }
}
template <class T>
__global__ void adaptive_avg_backward_kernel(const T* gy, T* gx, PoolGeom g, std::int64_t n) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t p = i / ip, r = i - p * ip;
    gx[i] = sh::adaptive_avg_grad_one(gy + p * op, g, r / g.in_w, r % g.in_w);
  }
}

std::int64_t outputs(const PoolGeom& g) { return g.planes * g.out_h * g.out_w; }
std::int64_t inputs(const PoolGeom& g) { return g.planes * g.in_h * g.in_w; }

}  // namespace

template <class T>
void max_pool2d(const T* x, T* y, std::int64_t* index, const PoolGeom& g, int device) {
  kd::launch_n("max_pool2d", outputs(g), on_device(device), max_pool_kernel<T>, x, y, index, g,
               outputs(g));
}
template <class T>
void max_pool2d_backward(const T* gy, const std::int64_t* index, T* gx, const PoolGeom& g,
                         int device) {
  kd::launch_n("max_pool2d_backward", inputs(g), on_device(device), max_pool_backward_kernel<T>, gy,
               index, gx, g, inputs(g));
}
template <class T>
void avg_pool2d(const T* x, T* y, const PoolGeom& g, int device) {
  kd::launch_n("avg_pool2d", outputs(g), on_device(device), avg_pool_kernel<T>, x, y, g,
               outputs(g));
}
template <class T>
void avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g, int device) {
  kd::launch_n("avg_pool2d_backward", inputs(g), on_device(device), avg_pool_backward_kernel<T>, gy,
               gx, g, inputs(g));
}
template <class T>
void adaptive_avg_pool2d(const T* x, T* y, const PoolGeom& g, int device) {
  kd::launch_n("adaptive_avg_pool2d", outputs(g), on_device(device), adaptive_avg_kernel<T>, x, y,
               g, outputs(g));
}
template <class T>
void adaptive_avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g, int device) {
  kd::launch_n("adaptive_avg_pool2d_backward", inputs(g), on_device(device),
               adaptive_avg_backward_kernel<T>, gy, gx, g, inputs(g));
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void max_pool2d<T>(const T*, T*, std::int64_t*, const PoolGeom&, int);                  \
  template void max_pool2d_backward<T>(const T*, const std::int64_t*, T*, const PoolGeom&, int);   \
  template void avg_pool2d<T>(const T*, T*, const PoolGeom&, int);                                 \
  template void avg_pool2d_backward<T>(const T*, T*, const PoolGeom&, int);                        \
  template void adaptive_avg_pool2d<T>(const T*, T*, const PoolGeom&, int);                        \
  template void adaptive_avg_pool2d_backward<T>(const T*, T*, const PoolGeom&, int);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::cuda_pool_norm
