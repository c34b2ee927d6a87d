// Fast CPU kernels of batch norm (src/ops/pool_norm_kernels.h): channels split over the calling
// thread's intra-op team (src/ops/cpu/channel_split.h); each channel's double sums run in
// (n, spatial) order through sum8, so no result depends on the thread count. The per-channel
// pieces below (statistics, gradient sums, dx) are written once and used both by the fused
// kernels of plain batch norm and by SyncBatchNorm's split ones (batch_norm_stats,
// batch_norm_backward_reduce, batch_norm_backward_elemt), so a group of one gives the same bits.
#include "ops/cpu/channel_split.h"
#include "ops/pool_norm_kernels.h"

namespace lockstep::kernels::cpu {

namespace {

namespace sh = ::lockstep::kernels::shared;
using detail::split;
using detail::sum8;

// Channel c's mean and Σ(x − mean)², two passes in double.
struct ChannelStats {
  double mean, m2;
};
template <class T>
ChannelStats channel_stats(const T* x, const BnGeom& g, std::int64_t c) {
  const double m = static_cast<double>(g.n * g.spatial);
  double sum = 0;
  for (std::int64_t n = 0; n < g.n; ++n) {
    const T* row = x + (n * g.c + c) * g.spatial;
    sum += sum8(g.spatial, [row](std::int64_t s) { return static_cast<double>(row[s]); });
  }
  const double mu = sum / m;
  double m2 = 0;
  for (std::int64_t n = 0; n < g.n; ++n) {
    const T* row = x + (n * g.c + c) * g.spatial;
    m2 += sum8(g.spatial, [row, mu](std::int64_t s) {
      const double d = static_cast<double>(row[s]) - mu;
      return d * d;
    });
  }
  return {mu, m2};
}

// Channel c's Σdy and Σdy·(x − mean), in double.
struct ChannelGradSums {
  double sum_dy, dot;
};
template <class T>
ChannelGradSums channel_grad_sums(const T* dy, const T* x, double mu, const BnGeom& g,
                                  std::int64_t c) {
  double sum = 0, dot = 0;
  for (std::int64_t n = 0; n < g.n; ++n) {
    const T* d = dy + (n * g.c + c) * g.spatial;
    const T* xr = x + (n * g.c + c) * g.spatial;
    sum += sum8(g.spatial, [d](std::int64_t s) { return static_cast<double>(d[s]); });
    dot += sum8(g.spatial, [d, xr, mu](std::int64_t s) {
      return static_cast<double>(d[s]) * (static_cast<double>(xr[s]) - mu);
    });
  }
  return {sum, dot};
}

// dx of channel c from its coefficients.
template <class T>
void channel_dx(const T* dy, const T* x, const sh::BnGradCoeffs<T>& q, const BnGeom& g,
                std::int64_t c, bool training, T* dx) {
  for (std::int64_t n = 0; n < g.n; ++n) {
    const std::int64_t base = (n * g.c + c) * g.spatial;
    for (std::int64_t s = 0; s < g.spatial; ++s)
      dx[base + s] = sh::bn_grad_one(dy[base + s], x[base + s], q, training);
  }
}

std::int64_t work(const BnGeom& g, std::int64_t passes) { return g.n * g.c * g.spatial * passes; }

}  // namespace

template <class T>
void batch_norm_train_stats(const T* x, const BnGeom& g, double eps, double momentum,
                            T* running_mean, T* running_var, double* mean, double* invstd) {
  const double m = static_cast<double>(g.n * g.spatial);
  split(g.c, work(g, 2), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const ChannelStats st = channel_stats(x, g, c);
      mean[c] = st.mean;
      invstd[c] = sh::bn_invstd(st.m2 / m, eps);
      if (running_mean)
        running_mean[c] = static_cast<T>(
            sh::bn_running(static_cast<double>(running_mean[c]), st.mean, momentum));
      if (running_var)
        running_var[c] = static_cast<T>(
            sh::bn_running(static_cast<double>(running_var[c]), st.m2 / (m - 1), momentum));
    }
  });
}

template <class T>
void batch_norm_stats(const T* x, const BnGeom& g, double* mean, double* var) {
  const double m = static_cast<double>(g.n * g.spatial);
  split(g.c, work(g, 2), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const ChannelStats st = channel_stats(x, g, c);
      mean[c] = st.mean;
      var[c] = st.m2 / m;
    }
  });
}

template <class T>
void batch_norm_eval_stats(const T* running_mean, const T* running_var, const BnGeom& g, double eps,
                           double* mean, double* invstd) {
  for (std::int64_t c = 0; c < g.c; ++c) {
    mean[c] = static_cast<double>(running_mean[c]);
    invstd[c] = sh::bn_invstd(static_cast<double>(running_var[c]), eps);
  }
}

template <class T>
void batch_norm_apply(const T* x, const double* mean, const double* invstd, const T* w, const T* b,
                      const BnGeom& g, T* y) {
  split(g.c, work(g, 1), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      T alpha, beta;
      sh::bn_affine_coeffs(mean[c], invstd[c], w, b, c, alpha, beta);
      for (std::int64_t n = 0; n < g.n; ++n) {
        const std::int64_t base = (n * g.c + c) * g.spatial;
        for (std::int64_t s = 0; s < g.spatial; ++s)
          y[base + s] = sh::bn_apply_one(x[base + s], alpha, beta);
      }
    }
  });
}

template <class T>
void batch_norm_backward(const T* dy, const T* x, const double* mean, const double* invstd,
                         const T* w, const BnGeom& g, bool training, T* dx, T* dw, T* db) {
  const double m = static_cast<double>(g.n * g.spatial);
  split(g.c, work(g, 2), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const ChannelGradSums s = channel_grad_sums(dy, x, mean[c], g, c);
      if (dw) dw[c] = static_cast<T>(s.dot * invstd[c]);
      if (db) db[c] = static_cast<T>(s.sum_dy);
      if (!dx) continue;
      const auto q = sh::bn_grad_coeffs<T>(mean[c], invstd[c], s.sum_dy, s.dot, m, w, c, training);
      channel_dx(dy, x, q, g, c, training, dx);
    }
  });
}

template <class T>
void batch_norm_backward_reduce(const T* dy, const T* x, const double* mean, const BnGeom& g,
                                double* sum_dy, double* dot) {
  split(g.c, work(g, 2), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const ChannelGradSums s = channel_grad_sums(dy, x, mean[c], g, c);
      sum_dy[c] = s.sum_dy;
      dot[c] = s.dot;
    }
  });
}

template <class T>
void batch_norm_backward_elemt(const T* dy, const T* x, const double* mean, const double* invstd,
                               const T* w, const double* sum_dy, const double* dot, double count,
                               const BnGeom& g, T* dx) {
  split(g.c, work(g, 1), [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const auto q = sh::bn_grad_coeffs<T>(mean[c], invstd[c], sum_dy[c], dot[c], count, w, c, true);
      channel_dx(dy, x, q, g, c, true, dx);
    }
  });
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void batch_norm_train_stats<T>(const T*, const BnGeom&, double, double, T*, T*,         \
                                          double*, double*);                                       \
  template void batch_norm_stats<T>(const T*, const BnGeom&, double*, double*);                    \
  template void batch_norm_eval_stats<T>(const T*, const T*, const BnGeom&, double, double*,       \
                                         double*);                                                 \
  template void batch_norm_apply<T>(const T*, const double*, const double*, const T*, const T*,    \
                                    const BnGeom&, T*);                                            \
  template void batch_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const BnGeom&, bool, T*, T*, T*);                           \
  template void batch_norm_backward_reduce<T>(const T*, const T*, const double*, const BnGeom&,    \
                                              double*, double*);                                   \
  template void batch_norm_backward_elemt<T>(const T*, const T*, const double*, const double*,     \
                                             const T*, const double*, const double*, double,       \
                                             const BnGeom&, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cpu
