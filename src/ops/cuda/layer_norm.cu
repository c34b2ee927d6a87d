// The CUDA kernels of layer_norm (src/ops/cuda_layer_norm_embedding_ops.h), on the shared bodies
// of src/ops/layer_norm_bodies.h, launched on the device's compute stream: one block of kThreads
// threads per row for the statistics, the normalization and dx (the row's double sums by the
// fixed block reduction of block_reduce.cuh: the same bits on every run), and one thread per
// column for the weight and bias gradients (the rows summed in row order in double, the CPU's
// expression and order).
#include <cuda_runtime.h>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda_layer_norm_embedding_ops.h"

namespace lockstep::cuda_layer_norm_embedding {

namespace {

namespace sh = ::lockstep::kernels::shared;
namespace kd = ::lockstep::kernels::cuda::detail;
using kd::kThreads;
using ::lockstep::kernels::cuda::on_device;

template <class T>
__global__ void ln_forward_kernel(const T* x, const T* w, const T* b, LnGeom g, double eps, T* y,
                                  double* mean, double* rstd) {
  __shared__ double s[kThreads];
  const std::int64_t i = blockIdx.x;
  const T* row = x + i * g.cols;
  const double n = static_cast<double>(g.cols);
  double sum = 0;
  for (std::int64_t j = threadIdx.x; j < g.cols; j += kThreads)
    sum = kd::add_rn(sum, static_cast<double>(row[j]));
  const double mu = kd::div_rn(kd::block_sum_fixed(sum, s), n);
  double m2 = 0;
  for (std::int64_t j = threadIdx.x; j < g.cols; j += kThreads) {
    const double d = kd::sub_rn(static_cast<double>(row[j]), mu);
    m2 = kd::add_rn(m2, kd::mul_rn(d, d));
  }
  const double rs = sh::ln_rstd(kd::div_rn(kd::block_sum_fixed(m2, s), n), eps);
  if (threadIdx.x == 0) {
    mean[i] = mu;
    rstd[i] = rs;
  }
  const auto q = sh::ln_row<T>(mu, rs);
  for (std::int64_t j = threadIdx.x; j < g.cols; j += kThreads)
    y[i * g.cols + j] = sh::ln_apply_one(row[j], q, w, b, j);
}

template <class T>
__global__ void ln_dx_kernel(const T* dy, const T* x, const double* mean, const double* rstd,
                             const T* w, LnGeom g, T* dx) {
  __shared__ double s[kThreads];
  const std::int64_t i = blockIdx.x, base = i * g.cols;
  const double mu = mean[i];
  double sum_g = 0, dot = 0;
  for (std::int64_t j = threadIdx.x; j < g.cols; j += kThreads) {
    const double gj = sh::ln_g(dy[base + j], w, j);
    sum_g = kd::add_rn(sum_g, gj);
    dot = kd::add_rn(dot, kd::mul_rn(gj, kd::sub_rn(static_cast<double>(x[base + j]), mu)));
  }
  sum_g = kd::block_sum_fixed(sum_g, s);
  dot = kd::block_sum_fixed(dot, s);
  const auto q = sh::ln_grad_coeffs<T>(mu, rstd[i], sum_g, dot, static_cast<double>(g.cols));
  for (std::int64_t j = threadIdx.x; j < g.cols; j += kThreads)
    dx[base + j] = sh::ln_grad_one(dy[base + j], x[base + j], w, j, q);
}

// dw[j] = Σ_i dy·((x − mean_i)·rstd_i), db[j] = Σ_i dy, rows in order (the CPU's expression).
template <class T>
__global__ void ln_param_grads_kernel(const T* dy, const T* x, const double* mean,
                                      const double* rstd, LnGeom g, T* dw, T* db) {
  LOCKSTEP_GRID_STRIDE(j, g.cols) {
    double sw = 0, sb = 0;
    for (std::int64_t i = 0; i < g.rows; ++i) {
      const std::int64_t k = i * g.cols + j;
      const double d = static_cast<double>(dy[k]);
      sw = kd::add_rn(
          sw, kd::mul_rn(d, kd::mul_rn(kd::sub_rn(static_cast<double>(x[k]), mean[i]), rstd[i])));
      sb = kd::add_rn(sb, d);
    }
    if (dw) dw[j] = static_cast<T>(sw);
    if (db) db[j] = static_cast<T>(sb);
  }
}

}  // namespace

template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, const LnGeom& g, double eps, T* y,
                        double* mean, double* rstd, int device) {
  if (g.cols == 0) return;
  kd::launch_blocks("layer_norm", g.rows, on_device(device), ln_forward_kernel<T>, x, w, b, g, eps,
                    y, mean, rstd);
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, const double* mean, const double* rstd,
                         const T* w, const LnGeom& g, T* dx, T* dw, T* db, int device) {
  if (dw || db)
    kd::launch_n("layer_norm_backward", g.cols, on_device(device), ln_param_grads_kernel<T>, dy, x,
                 mean, rstd, g, dw, db);
  if (dx && g.cols > 0)
    kd::launch_blocks("layer_norm_backward", g.rows, on_device(device), ln_dx_kernel<T>, dy, x,
                      mean, rstd, w, g, dx);
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void layer_norm_forward<T>(const T*, const T*, const T*, const LnGeom&, double, T*,     \
                                      double*, double*, int);                                      \
  template void layer_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const LnGeom&, T*, T*, T*, int);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::cuda_layer_norm_embedding
