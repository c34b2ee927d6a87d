// Reference (oracle) kernels of layer_norm and embedding: plain loops written after PyTorch's
// formulas (torch.nn.functional.layer_norm, embedding), independent of the shared bodies the
// fast and CUDA kernels use. Row statistics are plain double loops in column order; the weight
// and bias gradients plain double loops in row order; embedding's backward is the scatter-add
// of PyTorch's embedding_dense_backward (index order, in T).
#include <algorithm>
#include <cmath>

#include "ops/layer_norm_embedding_kernels.h"

namespace lockstep::kernels::ref {

template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, const LnGeom& g, double eps, T* y,
                        double* mean, double* rstd) {
  const double n = static_cast<double>(g.cols);
  for (std::int64_t i = 0; i < g.rows; ++i) {
    const T* row = x + i * g.cols;
    double sum = 0;
    for (std::int64_t j = 0; j < g.cols; ++j) sum += static_cast<double>(row[j]);
    const double mu = sum / n;
    double m2 = 0;
    for (std::int64_t j = 0; j < g.cols; ++j) {
      const double d = static_cast<double>(row[j]) - mu;
      m2 += d * d;
    }
    const double rs = 1.0 / std::sqrt(m2 / n + eps);
    mean[i] = mu;
    rstd[i] = rs;
    const T mean_t = static_cast<T>(mu), rstd_t = static_cast<T>(rs);
    for (std::int64_t j = 0; j < g.cols; ++j) {
      T v = (row[j] - mean_t) * rstd_t;
      if (w) v = v * w[j];
      if (b) v = v + b[j];
      y[i * g.cols + j] = v;
    }
  }
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, const double* mean, const double* rstd,
                         const T* w, const LnGeom& g, T* dx, T* dw, T* db) {
  const double n = static_cast<double>(g.cols);
  if (dw || db) {
    for (std::int64_t j = 0; j < g.cols; ++j) {
      double sw = 0, sb = 0;
      for (std::int64_t i = 0; i < g.rows; ++i) {
        const std::int64_t k = i * g.cols + j;
        const double d = static_cast<double>(dy[k]);
        sw += d * ((static_cast<double>(x[k]) - mean[i]) * rstd[i]);
        sb += d;
      }
      if (dw) dw[j] = static_cast<T>(sw);
      if (db) db[j] = static_cast<T>(sb);
    }
  }
  if (!dx) return;
  for (std::int64_t i = 0; i < g.rows; ++i) {
    const std::int64_t base = i * g.cols;
    double sum_g = 0, dot = 0;
    for (std::int64_t j = 0; j < g.cols; ++j) {
      const double gj = static_cast<double>(dy[base + j]) * (w ? static_cast<double>(w[j]) : 1.0);
      sum_g += gj;
      dot += gj * (static_cast<double>(x[base + j]) - mean[i]);
    }
    const T mu = static_cast<T>(mean[i]);
    const T scale = static_cast<T>(rstd[i]);
    const T k = static_cast<T>(dot * rstd[i] * rstd[i] / n);
    const T gm = static_cast<T>(sum_g / n);
    for (std::int64_t j = 0; j < g.cols; ++j) {
      const T gj = w ? dy[base + j] * w[j] : dy[base + j];
      dx[base + j] = (gj - gm - (x[base + j] - mu) * k) * scale;
    }
  }
}

template <class T>
void embedding(const T* weight, const std::int64_t* index, std::int64_t count, std::int64_t dim,
               T* y) {
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t j = 0; j < dim; ++j) y[i * dim + j] = weight[index[i] * dim + j];
}

template <class T>
void embedding_backward(const T* gy, const std::int64_t* index, std::int64_t count,
                        std::int64_t vocab, std::int64_t dim, T* dw) {
  std::fill(dw, dw + vocab * dim, T(0));
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t j = 0; j < dim; ++j) dw[index[i] * dim + j] += gy[i * dim + j];
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void layer_norm_forward<T>(const T*, const T*, const T*, const LnGeom&, double, T*,     \
                                      double*, double*);                                           \
  template void layer_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const LnGeom&, T*, T*, T*);                                 \
  template void embedding<T>(const T*, const std::int64_t*, std::int64_t, std::int64_t, T*);       \
  template void embedding_backward<T>(const T*, const std::int64_t*, std::int64_t, std::int64_t,   \
                                      std::int64_t, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::ref
