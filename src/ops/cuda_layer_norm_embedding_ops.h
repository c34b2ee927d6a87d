// Internal: the CUDA paths of layer_norm and embedding (src/ops/layer_norm.cpp, embedding.cpp),
// at the level of device pointers: the kernels::cpu contracts of
// src/ops/layer_norm_embedding_kernels.h, plus the CUDA device index, on device memory of that
// device. Implemented by src/ops/cuda/layer_norm.cu (on the shared bodies of
// src/ops/layer_norm_bodies.h) and src/ops/cuda/embedding.cu; in builds without CUDA
// src/ops/cuda_layer_norm_embedding_stub.cpp stands in and throws DeviceError (no cuda:k tensor
// can exist there, so it is never reached). No CUDA header is included here. embedding's
// forward is cuda_ops::index_select (src/ops/cuda_ops.h).
//
// Every function enqueues its kernels on the device's compute stream and returns before they
// finish; nothing is read back. Sizes may be 0 (nothing is launched). Differences from the CPU
// kernels: a row's statistics and gradient sums are one block reduction in double (one block of
// 256 threads per row, each summing a strided slice in index order, then a fixed tree), so they
// agree with the CPU's to rounding, not bit for bit; the weight and bias gradients are one
// thread per column summing the rows in row order (the CPU's order); embedding's backward is
// bit for bit the CPU's.
#pragma once

#include <cstdint>

#include "ops/layer_norm_bodies.h"

namespace lockstep::cuda_layer_norm_embedding {

using kernels::shared::LnGeom;

/// mean, rstd [rows] (double, device) and y, one block per row.
template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, const LnGeom& g, double eps, T* y,
                        double* mean, double* rstd, int device);
/// dx (one block per row), dw and db (one thread per column); each nullable.
template <class T>
void layer_norm_backward(const T* dy, const T* x, const double* mean, const double* rstd,
                         const T* w, const LnGeom& g, T* dx, T* dw, T* db, int device);
/// dw [vocab, dim], every element written: dw[v, j] = Σ gy[order[p], j] over p in
/// [offsets[v], offsets[v + 1]) in that order, in T, from 0 (one thread per element, no
/// atomics). order [count] holds the positions i sorted stably by index[i] and offsets
/// [vocab + 1] where each row's run starts (a counting sort made on the host), so each row adds
/// its gradients in index order, as the CPU.
template <class T>
void embedding_backward(const T* gy, const std::int64_t* order, const std::int64_t* offsets,
                        std::int64_t vocab, std::int64_t dim, T* dw, int device);

}  // namespace lockstep::cuda_layer_norm_embedding
