// Kernel entry points of layer_norm and embedding (src/ops/layer_norm.cpp, embedding.cpp), in the
// two families of src/ops/kernels.h:
//   ref::  plain loops, the oracle (src/ops/reference/layer_norm_embedding.cpp);
//   cpu::  fast kernels (src/ops/cpu/layer_norm.cpp, embedding.cpp): layer norm on the shared
//          bodies of src/ops/layer_norm_bodies.h (the CUDA kernels' own), rows split over the
//          calling thread's intra-op team; embedding split over the embedding's columns;
// dispatch:: picks one by the thread's KernelMode. All pointers are contiguous host arrays of
// checked sizes; T is float or double. No result depends on the thread count. The families
// agree bit for bit on embedding (both add each weight row's gradients in index order, in T) and
// on layer norm's weight and bias gradients given the same row statistics; the row statistics
// themselves (double sums in another order) agree to rounding.
#pragma once

#include <cstdint>

#include "lockstep/ops/kernel_mode.h"
#include "ops/layer_norm_bodies.h"

namespace lockstep::kernels {

using shared::LnGeom;

// Each family declares the same set (the macro keeps the two lists from drifting apart).
// Layer norm, x / y / dy / dx [rows, cols], w / b / dw / db [cols] (nullable), mean / rstd [rows]:
//   layer_norm_forward   mean and rstd of every row in double (two passes: Σx, then Σ(x − mean)²),
//                        y = ((x − mean)·rstd)·w + b (PyTorch's CUDA form, layer_norm_bodies.h);
//   layer_norm_backward  dx, dw, db (each nullable: not computed) from dy, x and the saved
//                        statistics; dw[j] = Σ_rows dy·(x − mean)·rstd and db[j] = Σ_rows dy, in
//                        double in row order, rounded once.
// Embedding, weight / dw [vocab, dim], index [count] (checked: in [0, vocab)), y / gy [count, dim]:
//   embedding            y[i] = weight[index[i]];
//   embedding_backward   dw = 0, then gy[i] added into dw[index[i]] for i = 0, 1, ... (index
//                        order, in T): every element of dw is written.
#define LOCKSTEP_LAYER_NORM_EMBEDDING_KERNELS                                                      \
  template <class T>                                                                               \
  void layer_norm_forward(const T* x, const T* w, const T* b, const LnGeom& g, double eps, T* y,   \
                          double* mean, double* rstd);                                             \
  template <class T>                                                                               \
  void layer_norm_backward(const T* dy, const T* x, const double* mean, const double* rstd,        \
                           const T* w, const LnGeom& g, T* dx, T* dw, T* db);                      \
  template <class T>                                                                               \
  void embedding(const T* weight, const std::int64_t* index, std::int64_t count, std::int64_t dim, \
                 T* y);                                                                            \
  template <class T>                                                                               \
  void embedding_backward(const T* gy, const std::int64_t* index, std::int64_t count,              \
                          std::int64_t vocab, std::int64_t dim, T* dw);

namespace ref {
LOCKSTEP_LAYER_NORM_EMBEDDING_KERNELS
}  // namespace ref

namespace cpu {
LOCKSTEP_LAYER_NORM_EMBEDDING_KERNELS
}  // namespace cpu

#undef LOCKSTEP_LAYER_NORM_EMBEDDING_KERNELS

namespace dispatch {

inline bool layer_norm_embedding_reference() {
  return ops::kernel_mode() == ops::KernelMode::Reference;
}

template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, const LnGeom& g, double eps, T* y,
                        double* mean, double* rstd) {
  layer_norm_embedding_reference() ? ref::layer_norm_forward<T>(x, w, b, g, eps, y, mean, rstd)
                                   : cpu::layer_norm_forward<T>(x, w, b, g, eps, y, mean, rstd);
}
template <class T>
void layer_norm_backward(const T* dy, const T* x, const double* mean, const double* rstd,
                         const T* w, const LnGeom& g, T* dx, T* dw, T* db) {
  layer_norm_embedding_reference()
      ? ref::layer_norm_backward<T>(dy, x, mean, rstd, w, g, dx, dw, db)
      : cpu::layer_norm_backward<T>(dy, x, mean, rstd, w, g, dx, dw, db);
}
template <class T>
void embedding(const T* weight, const std::int64_t* index, std::int64_t count, std::int64_t dim,
               T* y) {
  layer_norm_embedding_reference() ? ref::embedding<T>(weight, index, count, dim, y)
                                   : cpu::embedding<T>(weight, index, count, dim, y);
}
template <class T>
void embedding_backward(const T* gy, const std::int64_t* index, std::int64_t count,
                        std::int64_t vocab, std::int64_t dim, T* dw) {
  layer_norm_embedding_reference() ? ref::embedding_backward<T>(gy, index, count, vocab, dim, dw)
                                   : cpu::embedding_backward<T>(gy, index, count, vocab, dim, dw);
}

}  // namespace dispatch

}  // namespace lockstep::kernels
