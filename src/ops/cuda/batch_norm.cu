// The CUDA kernels of batch norm (src/ops/cuda_pool_norm_ops.h), on the shared bodies of
// src/ops/pool_norm_bodies.h, launched on the device's compute stream: one block of kThreads
// threads per channel for the statistics and the gradient sums (each thread sums a strided
// slice of the channel in index order in double, then a fixed shared-memory tree: the same bits
// on every run), and grid-stride kernels for the normalization and SyncBatchNorm's dx.
#include <cuda_runtime.h>

#include "lockstep/cuda/detail/check.h"
#include "ops/cuda/block_reduce.cuh"
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

// Element j (0 <= j < n·spatial) of channel c.
__device__ inline std::int64_t bn_offset(const BnGeom& g, std::int64_t c, std::int64_t j) {
  const std::int64_t n = j / g.spatial, s = j - n * g.spatial;
  return (n * g.c + c) * g.spatial + s;
}

// Channel c's mean and Σ(x − mean)² over its m = n·spatial elements (every thread of the
// block gets both).
struct Moments {
  double mean, var_sum;
};
template <class T>
__device__ Moments channel_moments(const T* x, const BnGeom& g, std::int64_t c, double* s) {
  const std::int64_t m = g.n * g.spatial;
  double sum = 0;
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads)
    sum = kd::add_rn(sum, static_cast<double>(x[bn_offset(g, c, j)]));
  const double mu = kd::div_rn(kd::block_sum_fixed(sum, s), static_cast<double>(m));
  double var_sum = 0;
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) {
    const double d = kd::sub_rn(static_cast<double>(x[bn_offset(g, c, j)]), mu);
    var_sum = kd::add_rn(var_sum, kd::mul_rn(d, d));
  }
  return {mu, kd::block_sum_fixed(var_sum, s)};
}

// Channel c's Σdy and Σdy·(x − mean) (every thread of the block gets both).
struct GradSums {
  double sum_dy, dot;
};
template <class T>
__device__ GradSums channel_grad_sums(const T* dy, const T* x, double mean, const BnGeom& g,
                                      std::int64_t c, double* s) {
  const std::int64_t m = g.n * g.spatial;
  double sum = 0, dot = 0;
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) {
    const std::int64_t o = bn_offset(g, c, j);
    const double d = static_cast<double>(dy[o]);
    sum = kd::add_rn(sum, d);
    dot = kd::add_rn(dot, kd::mul_rn(d, kd::sub_rn(static_cast<double>(x[o]), mean)));
  }
  sum = kd::block_sum_fixed(sum, s);
  return {sum, kd::block_sum_fixed(dot, s)};
}

template <class T>
__global__ void bn_train_stats_kernel(const T* x, BnGeom g, double eps, double momentum,
                                      T* running_mean, T* running_var, double* mean,
                                      double* invstd) {
  __shared__ double s[kThreads];
  const std::int64_t c = blockIdx.x, m = g.n * g.spatial;
  const auto [mu, var_sum] = channel_moments(x, g, c, s);
  if (threadIdx.x != 0) return;
  mean[c] = mu;
  invstd[c] = sh::bn_invstd(kd::div_rn(var_sum, static_cast<double>(m)), eps);
  if (running_mean)
    running_mean[c] =
        static_cast<T>(sh::bn_running(static_cast<double>(running_mean[c]), mu, momentum));
  if (running_var)
    running_var[c] =
        static_cast<T>(sh::bn_running(static_cast<double>(running_var[c]),
                                      kd::div_rn(var_sum, static_cast<double>(m - 1)), momentum));
}

template <class T>
__global__ void bn_eval_stats_kernel(const T* running_mean, const T* running_var, BnGeom g,
                                     double eps, double* mean, double* invstd) {
  LOCKSTEP_GRID_STRIDE(c, g.c) {
    mean[c] = static_cast<double>(running_mean[c]);
    invstd[c] = sh::bn_invstd(static_cast<double>(running_var[c]), eps);
  }
}

template <class T>
__global__ void bn_apply_kernel(const T* x, const double* mean, const double* invstd, const T* w,
                                const T* b, BnGeom g, T* y, std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t c = (i / g.spatial) % g.c;
    T alpha, beta;
    sh::bn_affine_coeffs(mean[c], invstd[c], w, b, c, alpha, beta);
    y[i] = sh::bn_apply_one(x[i], alpha, beta);
  }
}

template <class T>
__global__ void bn_backward_kernel(const T* dy, const T* x, const double* mean,
                                   const double* invstd, const T* w, BnGeom g, bool training, T* dx,
                                   T* dw, T* db) {
  __shared__ double s[kThreads];
  const std::int64_t c = blockIdx.x, m = g.n * g.spatial;
  const auto [sum, dot] = channel_grad_sums(dy, x, mean[c], g, c, s);
  if (threadIdx.x == 0) {
    if (dw) dw[c] = static_cast<T>(kd::mul_rn(dot, invstd[c]));
    if (db) db[c] = static_cast<T>(sum);
  }
  if (!dx) return;
  const auto q =
      sh::bn_grad_coeffs<T>(mean[c], invstd[c], sum, dot, static_cast<double>(m), w, c, training);
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) {
    const std::int64_t o = bn_offset(g, c, j);
    dx[o] = sh::bn_grad_one(dy[o], x[o], q, training);
  }
}

template <class T>
__global__ void bn_stats_kernel(const T* x, BnGeom g, double* mean, double* var) {
  __shared__ double s[kThreads];
  const std::int64_t c = blockIdx.x, m = g.n * g.spatial;
  const auto [mu, var_sum] = channel_moments(x, g, c, s);
  if (threadIdx.x != 0) return;
  mean[c] = mu;
  var[c] = kd::div_rn(var_sum, static_cast<double>(m));
}

template <class T>
__global__ void bn_backward_reduce_kernel(const T* dy, const T* x, const double* mean, BnGeom g,
                                          double* sum_dy, double* dot) {
  __shared__ double s[kThreads];
  const GradSums q = channel_grad_sums(dy, x, mean[blockIdx.x], g, blockIdx.x, s);
  if (threadIdx.x != 0) return;
  sum_dy[blockIdx.x] = q.sum_dy;
  dot[blockIdx.x] = q.dot;
}

template <class T>
__global__ void bn_backward_elemt_kernel(const T* dy, const T* x, const double* mean,
                                         const double* invstd, const T* w, const double* sum_dy,
                                         const double* dot, double count, BnGeom g, T* dx,
                                         std::int64_t n) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    const std::int64_t c = (i / g.spatial) % g.c;
    const auto q =
        sh::bn_grad_coeffs<T>(mean[c], invstd[c], sum_dy[c], dot[c], count, w, c, true);
    dx[i] = sh::bn_grad_one(dy[i], x[i], q, true);
  }
}


}  // namespace

template <class T>
void batch_norm_train_stats(const T* x, const BnGeom& g, double eps, double momentum,
                            T* running_mean, T* running_var, double* mean, double* invstd,
                            int device) {
  if (g.n * g.spatial == 0) return;
  kd::launch_blocks("batch_norm_train_stats", g.c, on_device(device), bn_train_stats_kernel<T>, x,
                     g, eps, momentum, running_mean, running_var, mean, invstd);
}
template <class T>
void batch_norm_eval_stats(const T* running_mean, const T* running_var, const BnGeom& g, double eps,
                           double* mean, double* invstd, int device) {
  kd::launch_n("batch_norm_eval_stats", g.c, on_device(device), bn_eval_stats_kernel<T>,
               running_mean, running_var, g, eps, mean, invstd);
}
template <class T>
void batch_norm_apply(const T* x, const double* mean, const double* invstd, const T* w, const T* b,
                      const BnGeom& g, T* y, int device) {
  const std::int64_t n = g.n * g.c * g.spatial;
  kd::launch_n("batch_norm_apply", n, on_device(device), bn_apply_kernel<T>, x, mean, invstd, w, b,
               g, y, n);
}
template <class T>
void batch_norm_backward(const T* dy, const T* x, const double* mean, const double* invstd,
                         const T* w, const BnGeom& g, bool training, T* dx, T* dw, T* db,
                         int device) {
  kd::launch_blocks("batch_norm_backward", g.c, on_device(device), bn_backward_kernel<T>, dy, x,
                     mean, invstd, w, g, training, dx, dw, db);
}

template <class T>
void batch_norm_stats(const T* x, const BnGeom& g, double* mean, double* var, int device) {
  if (g.n * g.spatial == 0) return;
  kd::launch_blocks("batch_norm_stats", g.c, on_device(device), bn_stats_kernel<T>, x, g, mean,
                     var);
}
template <class T>
void batch_norm_backward_reduce(const T* dy, const T* x, const double* mean, const BnGeom& g,
                                double* sum_dy, double* dot, int device) {
  kd::launch_blocks("batch_norm_backward_reduce", g.c, on_device(device),
                     bn_backward_reduce_kernel<T>, dy, x, mean, g, sum_dy, dot);
}
template <class T>
void batch_norm_backward_elemt(const T* dy, const T* x, const double* mean, const double* invstd,
                               const T* w, const double* sum_dy, const double* dot, double count,
                               const BnGeom& g, T* dx, int device) {
  const std::int64_t n = g.n * g.c * g.spatial;
  kd::launch_n("batch_norm_backward_elemt", n, on_device(device), bn_backward_elemt_kernel<T>, dy,
               x, mean, invstd, w, sum_dy, dot, count, g, dx, n);
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void batch_norm_train_stats<T>(const T*, const BnGeom&, double, double, T*, T*,         \
                                          double*, double*, int);                                  \
  template void batch_norm_eval_stats<T>(const T*, const T*, const BnGeom&, double, double*,       \
                                         double*, int);                                            \
  template void batch_norm_apply<T>(const T*, const double*, const double*, const T*, const T*,    \
                                    const BnGeom&, T*, int);                                       \
  template void batch_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const BnGeom&, bool, T*, T*, T*, int);                      \
  template void batch_norm_stats<T>(const T*, const BnGeom&, double*, double*, int);               \
  template void batch_norm_backward_reduce<T>(const T*, const T*, const double*, const BnGeom&,    \
                                              double*, double*, int);                              \
  template void batch_norm_backward_elemt<T>(const T*, const T*, const double*, const double*,     \
                                             const T*, const double*, const double*, double,       \
                                             const BnGeom&, T*, int);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::cuda_pool_norm
