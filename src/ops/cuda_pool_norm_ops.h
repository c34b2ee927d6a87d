// Internal: the CUDA paths of the pooling and batch-norm ops (src/ops/pool.cpp, batch_norm.cpp),
// at the level of device pointers: the kernels::cpu contracts of src/ops/pool_norm_kernels.h,
// same arguments plus the CUDA device index, on device memory of that device. Implemented by
// hand-written kernels in src/ops/cuda/pool_norm.cu on the shared bodies of
// src/ops/pool_norm_bodies.h (so each output element is the CPU's fast kernel's expression);
// in builds without CUDA src/ops/cuda_pool_norm_stub.cpp stands in and throws DeviceError (no
// cuda:k tensor can exist there, so it is never reached). No CUDA header is included here.
//
// Every function enqueues its kernels on the device's compute stream (lockstep::cuda::
// compute_stream) and returns before they finish; nothing is read back. Sizes may be 0
// (nothing is launched). Differences from the CPU kernels: batch norm's per-channel sums are a
// block reduction per channel in double (one block of 256 threads per channel, each summing a
// strided slice in index order, then a fixed tree), so they agree with the CPU's sequential
// double sums to rounding, not bit for bit; every pool result is bit for bit the CPU's.
#pragma once

#include <cstdint>

#include "ops/pool_norm_bodies.h"

namespace lockstep::cuda_pool_norm {

using kernels::shared::BnGeom;
using kernels::shared::PoolGeom;

template <class T>
void max_pool2d(const T* x, T* y, std::int64_t* index, const PoolGeom& g, int device);
template <class T>
void max_pool2d_backward(const T* gy, const std::int64_t* index, T* gx, const PoolGeom& g,
                         int device);
template <class T>
void avg_pool2d(const T* x, T* y, const PoolGeom& g, int device);
template <class T>
void avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g, int device);
template <class T>
void adaptive_avg_pool2d(const T* x, T* y, const PoolGeom& g, int device);
template <class T>
void adaptive_avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g, int device);

/// Training statistics (one block per channel, double): mean, invstd [c] (double, device) and
/// the in-place running updates (running_mean / running_var nullable).
template <class T>
void batch_norm_train_stats(const T* x, const BnGeom& g, double eps, double momentum,
                            T* running_mean, T* running_var, double* mean, double* invstd,
                            int device);
template <class T>
void batch_norm_eval_stats(const T* running_mean, const T* running_var, const BnGeom& g, double eps,
                           double* mean, double* invstd, int device);
template <class T>
void batch_norm_apply(const T* x, const double* mean, const double* invstd, const T* w, const T* b,
                      const BnGeom& g, T* y, int device);
/// Backward: a per-channel block reduction of Σdy and Σdy·(x − mean) (double), then dx
/// elementwise; dx, dw, db nullable.
template <class T>
void batch_norm_backward(const T* dy, const T* x, const double* mean, const double* invstd,
                         const T* w, const BnGeom& g, bool training, T* dx, T* dw, T* db,
                         int device);
/// SyncBatchNorm's pieces (the kernels::cpu contracts): this piece's mean and biased var, one
/// block per channel; Σdy and Σdy·(x − mean), one block per channel; dx from the group's sums
/// and total count, elementwise.
template <class T>
void batch_norm_stats(const T* x, const BnGeom& g, double* mean, double* var, int device);
template <class T>
void batch_norm_backward_reduce(const T* dy, const T* x, const double* mean, const BnGeom& g,
                                double* sum_dy, double* dot, int device);
template <class T>
void batch_norm_backward_elemt(const T* dy, const T* x, const double* mean, const double* invstd,
                               const T* w, const double* sum_dy, const double* dot, double count,
                               const BnGeom& g, T* dx, int device);

}  // namespace lockstep::cuda_pool_norm
