// Kernel entry points of the pooling and batch-norm ops (src/ops/pool.cpp, batch_norm.cpp), in
// the two families of src/ops/kernels.h:
//   ref::  plain loops, the oracle (src/ops/reference/pool_norm.cpp): scatter-form backward as
//          PyTorch's CPU kernels, statistics in plain double loops; independent of the bodies;
//   cpu::  fast kernels (src/ops/cpu/pool_norm.cpp): the shared bodies of
//          src/ops/pool_norm_bodies.h (the CUDA kernels' own), parallel over N·C planes (pools)
//          or channels (batch norm) on the calling thread's intra-op team when the work pays;
// dispatch:: picks one by the thread's KernelMode. All pointers are contiguous host arrays of
// checked sizes; T is float or double. Both families add in the same order, so their pooling
// results are bit-identical and their batch-norm results agree to rounding.
#pragma once

#include <cstdint>

#include "lockstep/ops/kernel_mode.h"
#include "ops/pool_norm_bodies.h"

namespace lockstep::kernels {

using shared::BnGeom;
using shared::PoolGeom;

// Each family declares the same set (the macro keeps the two lists from drifting apart).
// Pools: x [planes, in_h, in_w], y / gy / index [planes, out_h, out_w], gx like x (every element
// written). max_pool2d writes each output's argmax (index within its plane, int64) for backward.
// Batch norm, x / y / dy / dx [n, c, spatial], per-channel arrays [c]:
//   batch_norm_train_stats  mean[c] and invstd[c] = 1/sqrt(σ²_biased + eps) in double (two
//                           passes over x in double); running_mean / running_var (nullable)
//                           updated in place with momentum, running_var with the unbiased σ²;
//   batch_norm_eval_stats   mean = running_mean, invstd = 1/sqrt(running_var + eps);
//   batch_norm_apply        y = x·alpha + beta per channel (w, b nullable: 1 and 0);
//   batch_norm_backward     dx, dw, db (each nullable: not computed) from dy, x and the saved
//                           mean / invstd; training: through the batch statistics.
// SyncBatchNorm's pieces (nn/sync_batch_norm.h; PyTorch's batch_norm_stats,
// batch_norm_backward_reduce and batch_norm_backward_elemt), the same per-channel sums:
//   batch_norm_stats           mean[c] and the biased var[c] of this piece (double, two passes);
//   batch_norm_backward_reduce sum_dy[c] = Σdy, dot[c] = Σdy·(x − mean) over this piece;
//   batch_norm_backward_elemt  dx from the group's sum_dy, dot and total count (training form).
#define LOCKSTEP_POOL_NORM_KERNELS                                                            \
  template <class T>                                                                          \
  void max_pool2d(const T* x, T* y, std::int64_t* index, const PoolGeom& g);                  \
  template <class T>                                                                          \
  void max_pool2d_backward(const T* gy, const std::int64_t* index, T* gx, const PoolGeom& g); \
  template <class T>                                                                          \
  void avg_pool2d(const T* x, T* y, const PoolGeom& g);                                       \
  template <class T>                                                                          \
  void avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g);                            \
  template <class T>                                                                          \
  void adaptive_avg_pool2d(const T* x, T* y, const PoolGeom& g);                              \
  template <class T>                                                                          \
  void adaptive_avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g);                   \
  template <class T>                                                                          \
  void batch_norm_train_stats(const T* x, const BnGeom& g, double eps, double momentum,       \
                              T* running_mean, T* running_var, double* mean, double* invstd); \
  template <class T>                                                                          \
  void batch_norm_eval_stats(const T* running_mean, const T* running_var, const BnGeom& g,    \
                             double eps, double* mean, double* invstd);                       \
  template <class T>                                                                          \
  void batch_norm_apply(const T* x, const double* mean, const double* invstd, const T* w,     \
                        const T* b, const BnGeom& g, T* y);                                   \
  template <class T>                                                                          \
  void batch_norm_backward(const T* dy, const T* x, const double* mean, const double* invstd, \
                           const T* w, const BnGeom& g, bool training, T* dx, T* dw, T* db); \
  template <class T>                                                                          \
  void batch_norm_stats(const T* x, const BnGeom& g, double* mean, double* var);              \
  template <class T>                                                                          \
  void batch_norm_backward_reduce(const T* dy, const T* x, const double* mean,                \
                                  const BnGeom& g, double* sum_dy, double* dot);              \
  template <class T>                                                                          \
  void batch_norm_backward_elemt(const T* dy, const T* x, const double* mean,                 \
                                 const double* invstd, const T* w, const double* sum_dy,      \
                                 const double* dot, double count, const BnGeom& g, T* dx);

namespace ref {
LOCKSTEP_POOL_NORM_KERNELS
}  // namespace ref

namespace cpu {
LOCKSTEP_POOL_NORM_KERNELS
}  // namespace cpu

#undef LOCKSTEP_POOL_NORM_KERNELS

namespace dispatch {

inline bool pool_norm_reference() { return ops::kernel_mode() == ops::KernelMode::Reference; }

template <class T>
void max_pool2d(const T* x, T* y, std::int64_t* index, const PoolGeom& g) {
  pool_norm_reference() ? ref::max_pool2d<T>(x, y, index, g) : cpu::max_pool2d<T>(x, y, index, g);
}
template <class T>
void max_pool2d_backward(const T* gy, const std::int64_t* index, T* gx, const PoolGeom& g) {
  pool_norm_reference() ? ref::max_pool2d_backward<T>(gy, index, gx, g)
                        : cpu::max_pool2d_backward<T>(gy, index, gx, g);
}
template <class T>
void avg_pool2d(const T* x, T* y, const PoolGeom& g) {
  pool_norm_reference() ? ref::avg_pool2d<T>(x, y, g) : cpu::avg_pool2d<T>(x, y, g);
}
template <class T>
void avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g) {
  pool_norm_reference() ? ref::avg_pool2d_backward<T>(gy, gx, g)
                        : cpu::avg_pool2d_backward<T>(gy, gx, g);
}
template <class T>
void adaptive_avg_pool2d(const T* x, T* y, const PoolGeom& g) {
  pool_norm_reference() ? ref::adaptive_avg_pool2d<T>(x, y, g)
                        : cpu::adaptive_avg_pool2d<T>(x, y, g);
}
template <class T>
void adaptive_avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g) {
  pool_norm_reference() ? ref::adaptive_avg_pool2d_backward<T>(gy, gx, g)
                        : cpu::adaptive_avg_pool2d_backward<T>(gy, gx, g);
}
template <class T>
void batch_norm_train_stats(const T* x, const BnGeom& g, double eps, double momentum,
                            T* running_mean, T* running_var, double* mean, double* invstd) {
  pool_norm_reference()
      ? ref::batch_norm_train_stats<T>(x, g, eps, momentum, running_mean, running_var, mean, invstd)
      : cpu::batch_norm_train_stats<T>(x, g, eps, momentum, running_mean, running_var, mean,
                                       invstd);
}
template <class T>
void batch_norm_eval_stats(const T* running_mean, const T* running_var, const BnGeom& g, double eps,
                           double* mean, double* invstd) {
  pool_norm_reference()
      ? ref::batch_norm_eval_stats<T>(running_mean, running_var, g, eps, mean, invstd)
      : cpu::batch_norm_eval_stats<T>(running_mean, running_var, g, eps, mean, invstd);
}
template <class T>
void batch_norm_apply(const T* x, const double* mean, const double* invstd, const T* w, const T* b,
                      const BnGeom& g, T* y) {
  pool_norm_reference() ? ref::batch_norm_apply<T>(x, mean, invstd, w, b, g, y)
                        : cpu::batch_norm_apply<T>(x, mean, invstd, w, b, g, y);
}
template <class T>
void batch_norm_backward(const T* dy, const T* x, const double* mean, const double* invstd,
                         const T* w, const BnGeom& g, bool training, T* dx, T* dw, T* db) {
  pool_norm_reference()
      ? ref::batch_norm_backward<T>(dy, x, mean, invstd, w, g, training, dx, dw, db)
      : cpu::batch_norm_backward<T>(dy, x, mean, invstd, w, g, training, dx, dw, db);
}

template <class T>
void batch_norm_stats(const T* x, const BnGeom& g, double* mean, double* var) {
  pool_norm_reference() ? ref::batch_norm_stats<T>(x, g, mean, var)
                        : cpu::batch_norm_stats<T>(x, g, mean, var);
}
template <class T>
void batch_norm_backward_reduce(const T* dy, const T* x, const double* mean, const BnGeom& g,
                                double* sum_dy, double* dot) {
  pool_norm_reference() ? ref::batch_norm_backward_reduce<T>(dy, x, mean, g, sum_dy, dot)
                        : cpu::batch_norm_backward_reduce<T>(dy, x, mean, g, sum_dy, dot);
}
template <class T>
void batch_norm_backward_elemt(const T* dy, const T* x, const double* mean, const double* invstd,
                               const T* w, const double* sum_dy, const double* dot, double count,
                               const BnGeom& g, T* dx) {
  pool_norm_reference()
      ? ref::batch_norm_backward_elemt<T>(dy, x, mean, invstd, w, sum_dy, dot, count, g, dx)
      : cpu::batch_norm_backward_elemt<T>(dy, x, mean, invstd, w, sum_dy, dot, count, g, dx);
}

}  // namespace dispatch

}  // namespace lockstep::kernels
