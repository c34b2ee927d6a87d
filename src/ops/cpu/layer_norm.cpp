// Fast CPU kernels of layer_norm (src/ops/layer_norm_embedding_kernels.h) on the shared bodies of
// src/ops/layer_norm_bodies.h. The forward and dx split rows over the calling thread's intra-op
// team (src/ops/cpu/channel_split.h), each row's double sums running in column order through
// sum8; the weight and bias gradients split columns, each column summed over the rows in row
// order. Whoever computes a row or a column, its sums are the same: no result depends on the
// thread count.
#include <vector>

#include "ops/cpu/channel_split.h"
#include "ops/layer_norm_embedding_kernels.h"

namespace lockstep::kernels::cpu {

namespace {

namespace sh = ::lockstep::kernels::shared;
using detail::split;
using detail::sum8;

std::int64_t ln_work(const LnGeom& g, std::int64_t passes) { return g.rows * g.cols * passes; }

// dw[j] = Σ_i dy·(x − mean_i)·rstd_i and db[j] = Σ_i dy over columns [j0, j1), rows in order.
template <class T>
void ln_param_grads(const T* dy, const T* x, const double* mean, const double* rstd,
                    const LnGeom& g, std::int64_t j0, std::int64_t j1, T* dw, T* db) {
  std::vector<double> sw(static_cast<std::size_t>(j1 - j0)), sb(sw.size());
  for (std::int64_t i = 0; i < g.rows; ++i) {
    const T* d = dy + i * g.cols;
    const T* xr = x + i * g.cols;
    const double mu = mean[i], rs = rstd[i];
    for (std::int64_t j = j0; j < j1; ++j) {
      const double dj = static_cast<double>(d[j]);
      sw[j - j0] += dj * ((static_cast<double>(xr[j]) - mu) * rs);
      sb[j - j0] += dj;
    }
  }
  for (std::int64_t j = j0; j < j1; ++j) {
    if (dw) dw[j] = static_cast<T>(sw[j - j0]);
    if (db) db[j] = static_cast<T>(sb[j - j0]);
  }
}

}  // namespace

template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, const LnGeom& g, double eps, T* y,
                        double* mean, double* rstd) {
  const double n = static_cast<double>(g.cols);
  split(g.rows, ln_work(g, 3), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const T* row = x + i * g.cols;
      const double mu =
          sum8(g.cols, [row](std::int64_t j) { return static_cast<double>(row[j]); }) / n;
      const double m2 = sum8(g.cols, [row, mu](std::int64_t j) {
        const double d = static_cast<double>(row[j]) - mu;
        return d * d;
      });
      const double rs = sh::ln_rstd(m2 / n, eps);
      mean[i] = mu;
      rstd[i] = rs;
      const auto q = sh::ln_row<T>(mu, rs);
      T* out = y + i * g.cols;
      for (std::int64_t j = 0; j < g.cols; ++j) out[j] = sh::ln_apply_one(row[j], q, w, b, j);
    }
  });
}

template <class T>
void layer_norm_backward(const T* dy, const T* x, const double* mean, const double* rstd,
                         const T* w, const LnGeom& g, T* dx, T* dw, T* db) {
  if (dw || db)
    split(g.cols, ln_work(g, 1), [&](std::int64_t j0, std::int64_t j1) {
      ln_param_grads(dy, x, mean, rstd, g, j0, j1, dw, db);
    });
  if (!dx) return;
  const double n = static_cast<double>(g.cols);
  split(g.rows, ln_work(g, 2), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const T* d = dy + i * g.cols;
      const T* xr = x + i * g.cols;
      const double mu = mean[i];
      const double sum_g = sum8(g.cols, [d, w](std::int64_t j) { return sh::ln_g(d[j], w, j); });
      const double dot = sum8(g.cols, [d, xr, w, mu](std::int64_t j) {
        return sh::ln_g(d[j], w, j) * (static_cast<double>(xr[j]) - mu);
      });
      const auto q = sh::ln_grad_coeffs<T>(mu, rstd[i], sum_g, dot, n);
      T* out = dx + i * g.cols;
      for (std::int64_t j = 0; j < g.cols; ++j) out[j] = sh::ln_grad_one(d[j], xr[j], w, j, q);
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void layer_norm_forward<T>(const T*, const T*, const T*, const LnGeom&, double, T*,     \
                                      double*, double*);                                           \
  template void layer_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const LnGeom&, T*, T*, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cpu
