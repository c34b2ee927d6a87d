// Reference (oracle) kernels of the pools and batch norm: plain loops written after PyTorch's CPU
// kernels, independent of the shared bodies the fast and CUDA kernels use. Pool backward is the
// scatter form (for each output, add into its window's inputs, outputs in increasing order);
// statistics are plain double loops in (n, spatial) order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/pool_norm_kernels.h"

namespace lockstep::kernels::ref {

namespace {

// The in-image part [h0, h1) x [w0, w1) of output (oh, ow)'s window.
struct Window {
  std::int64_t h0, h1, w0, w1;
};
Window window(const PoolGeom& g, std::int64_t oh, std::int64_t ow) {
  const std::int64_t hs = oh * g.s_h - g.p_h, ws = ow * g.s_w - g.p_w;
  return {std::max<std::int64_t>(hs, 0), std::min(hs + g.k_h, g.in_h),
          std::max<std::int64_t>(ws, 0), std::min(ws + g.k_w, g.in_w)};
}
Window adaptive_window(const PoolGeom& g, std::int64_t oh, std::int64_t ow) {
  // floor(o·in/out) and ceil((o+1)·in/out), in exact integer arithmetic
  auto lo = [](std::int64_t o, std::int64_t out, std::int64_t in) { return o * in / out; };
  auto hi = [](std::int64_t o, std::int64_t out, std::int64_t in) {
    return ((o + 1) * in + out - 1) / out;
  };
  return {lo(oh, g.out_h, g.in_h), hi(oh, g.out_h, g.in_h), lo(ow, g.out_w, g.in_w),
          hi(ow, g.out_w, g.in_w)};
}
std::int64_t in_plane(const PoolGeom& g) { return g.in_h * g.in_w; }
std::int64_t out_plane(const PoolGeom& g) { return g.out_h * g.out_w; }

}  // namespace

template <class T>
void max_pool2d(const T* x, T* y, std::int64_t* index, const PoolGeom& g) {
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh)
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        const Window win = window(g, oh, ow);
        const T* plane = x + p * in_plane(g);
        std::int64_t best = win.h0 * g.in_w + win.w0;
        T m = -std::numeric_limits<T>::infinity();
        for (std::int64_t h = win.h0; h < win.h1; ++h)
          for (std::int64_t w = win.w0; w < win.w1; ++w) {
            const T v = plane[h * g.in_w + w];
            if (v > m || std::isnan(v)) m = v, best = h * g.in_w + w;
          }
        const std::int64_t o = p * out_plane(g) + oh * g.out_w + ow;
        y[o] = m;
        index[o] = best;
      }
}

template <class T>
void max_pool2d_backward(const T* gy, const std::int64_t* index, T* gx, const PoolGeom& g) {
  std::fill(gx, gx + g.planes * in_plane(g), T(0));
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t o = 0; o < out_plane(g); ++o)
      gx[p * in_plane(g) + index[p * out_plane(g) + o]] += gy[p * out_plane(g) + o];
}

template <class T>
void avg_pool2d(const T* x, T* y, const PoolGeom& g) {
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh)
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        const Window win = window(g, oh, ow);
        T sum = 0;
        for (std::int64_t h = win.h0; h < win.h1; ++h)
          for (std::int64_t w = win.w0; w < win.w1; ++w) sum += x[p * in_plane(g) + h * g.in_w + w];
        y[p * out_plane(g) + oh * g.out_w + ow] = sum / static_cast<T>(g.k_h * g.k_w);
      }
}

template <class T>
void avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g) {
  std::fill(gx, gx + g.planes * in_plane(g), T(0));
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh)
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        const Window win = window(g, oh, ow);
        const T delta = gy[p * out_plane(g) + oh * g.out_w + ow] / static_cast<T>(g.k_h * g.k_w);
        for (std::int64_t h = win.h0; h < win.h1; ++h)
          for (std::int64_t w = win.w0; w < win.w1; ++w)
            gx[p * in_plane(g) + h * g.in_w + w] += delta;
      }
}

template <class T>
void adaptive_avg_pool2d(const T* x, T* y, const PoolGeom& g) {
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh)
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        const Window win = adaptive_window(g, oh, ow);
        T sum = 0;
        for (std::int64_t h = win.h0; h < win.h1; ++h)
          for (std::int64_t w = win.w0; w < win.w1; ++w) sum += x[p * in_plane(g) + h * g.in_w + w];
        y[p * out_plane(g) + oh * g.out_w + ow] =
            sum / static_cast<T>(win.h1 - win.h0) / static_cast<T>(win.w1 - win.w0);
      }
}

template <class T>
void adaptive_avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g) {
  std::fill(gx, gx + g.planes * in_plane(g), T(0));
  for (std::int64_t p = 0; p < g.planes; ++p)
    for (std::int64_t oh = 0; oh < g.out_h; ++oh)
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        const Window win = adaptive_window(g, oh, ow);
        const T delta = gy[p * out_plane(g) + oh * g.out_w + ow] / static_cast<T>(win.h1 - win.h0) /
                        static_cast<T>(win.w1 - win.w0);
        for (std::int64_t h = win.h0; h < win.h1; ++h)
          for (std::int64_t w = win.w0; w < win.w1; ++w)
            gx[p * in_plane(g) + h * g.in_w + w] += delta;
      }
}

// ---- batch norm ---------------------------------------------------------------------------------

namespace {
template <class T>
const T& at(const T* a, const BnGeom& g, std::int64_t n, std::int64_t c, std::int64_t s) {
  return a[(n * g.c + c) * g.spatial + s];
}
double inv_std(double var, double eps) {
  return var == 0 && eps == 0 ? 0.0 : 1.0 / std::sqrt(var + eps);
}

// Channel c's mean and Σ(x − mean)², summed in index order in double.
struct Moments {
  double mean, var_sum;
};
template <class T>
Moments channel_moments(const T* x, const BnGeom& g, std::int64_t c) {
  const double m = static_cast<double>(g.n * g.spatial);
  double sum = 0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t s = 0; s < g.spatial; ++s) sum += static_cast<double>(at(x, g, n, c, s));
  const double mu = sum / m;
  double var_sum = 0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t s = 0; s < g.spatial; ++s) {
      const double d = static_cast<double>(at(x, g, n, c, s)) - mu;
      var_sum += d * d;
    }
  return {mu, var_sum};
}

// Channel c's Σdy and Σdy·(x − mean), in index order in double.
struct GradSums {
  double sum_dy, dot;
};
template <class T>
GradSums channel_grad_sums(const T* dy, const T* x, double mean, const BnGeom& g, std::int64_t c) {
  double sum = 0, dot = 0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t s = 0; s < g.spatial; ++s) {
      const double d = static_cast<double>(at(dy, g, n, c, s));
      sum += d;
      dot += d * (static_cast<double>(at(x, g, n, c, s)) - mean);
    }
  return {sum, dot};
}

// dx of channel c from its sums over `count` elements (count 0: eval mode, dy · scale).
template <class T>
void channel_dx(const T* dy, const T* x, double mean, double invstd, const T* w, GradSums q,
                double count, const BnGeom& g, std::int64_t c, T* dx) {
  const T scale = static_cast<T>(invstd * (w ? static_cast<double>(w[c]) : 1.0));
  const T mu = static_cast<T>(mean);
  const T k = count > 0 ? static_cast<T>(q.dot * invstd * invstd / count) : T(0);
  const T grad_mean = count > 0 ? static_cast<T>(q.sum_dy / count) : T(0);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t s = 0; s < g.spatial; ++s) {
      const std::int64_t i = (n * g.c + c) * g.spatial + s;
      dx[i] = count > 0 ? (dy[i] - grad_mean - (x[i] - mu) * k) * scale : dy[i] * scale;
    }
}
}  // namespace

template <class T>
void batch_norm_train_stats(const T* x, const BnGeom& g, double eps, double momentum,
                            T* running_mean, T* running_var, double* mean, double* invstd) {
  const double m = static_cast<double>(g.n * g.spatial);
  for (std::int64_t c = 0; c < g.c; ++c) {
    const auto [mu, var_sum] = channel_moments(x, g, c);
    mean[c] = mu;
    invstd[c] = inv_std(var_sum / m, eps);
    if (running_mean)
      running_mean[c] =
          static_cast<T>(momentum * mu + (1 - momentum) * static_cast<double>(running_mean[c]));
    if (running_var)
      running_var[c] = static_cast<T>(momentum * (var_sum / (m - 1)) +
                                      (1 - momentum) * static_cast<double>(running_var[c]));
  }
}

template <class T>
void batch_norm_eval_stats(const T* running_mean, const T* running_var, const BnGeom& g, double eps,
                           double* mean, double* invstd) {
  for (std::int64_t c = 0; c < g.c; ++c) {
    mean[c] = static_cast<double>(running_mean[c]);
    invstd[c] = inv_std(static_cast<double>(running_var[c]), eps);
  }
}

template <class T>
void batch_norm_apply(const T* x, const double* mean, const double* invstd, const T* w, const T* b,
                      const BnGeom& g, T* y) {
  for (std::int64_t c = 0; c < g.c; ++c) {
    const double a = invstd[c] * (w ? static_cast<double>(w[c]) : 1.0);
    const T alpha = static_cast<T>(a);
    const T beta = static_cast<T>((b ? static_cast<double>(b[c]) : 0.0) - mean[c] * a);
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t s = 0; s < g.spatial; ++s) {
        const std::int64_t i = (n * g.c + c) * g.spatial + s;
        y[i] = x[i] * alpha + beta;
      }
  }
}

template <class T>
void batch_norm_backward(const T* dy, const T* x, const double* mean, const double* invstd,
                         const T* w, const BnGeom& g, bool training, T* dx, T* dw, T* db) {
  const double m = static_cast<double>(g.n * g.spatial);
  for (std::int64_t c = 0; c < g.c; ++c) {
    const GradSums q = channel_grad_sums(dy, x, mean[c], g, c);
    if (dw) dw[c] = static_cast<T>(q.dot * invstd[c]);
    if (db) db[c] = static_cast<T>(q.sum_dy);
    if (dx) channel_dx(dy, x, mean[c], invstd[c], w, q, training ? m : 0.0, g, c, dx);
  }
}

template <class T>
void batch_norm_stats(const T* x, const BnGeom& g, double* mean, double* var) {
  const double m = static_cast<double>(g.n * g.spatial);
  for (std::int64_t c = 0; c < g.c; ++c) {
    const auto [mu, var_sum] = channel_moments(x, g, c);
    mean[c] = mu;
    var[c] = var_sum / m;
  }
}

template <class T>
void batch_norm_backward_reduce(const T* dy, const T* x, const double* mean, const BnGeom& g,
                                double* sum_dy, double* dot) {
  for (std::int64_t c = 0; c < g.c; ++c) {
    const GradSums q = channel_grad_sums(dy, x, mean[c], g, c);
    sum_dy[c] = q.sum_dy;
    dot[c] = q.dot;
  }
}

template <class T>
void batch_norm_backward_elemt(const T* dy, const T* x, const double* mean, const double* invstd,
                               const T* w, const double* sum_dy, const double* dot, double count,
                               const BnGeom& g, T* dx) {
  for (std::int64_t c = 0; c < g.c; ++c)
    channel_dx(dy, x, mean[c], invstd[c], w, GradSums{sum_dy[c], dot[c]}, count, g, c, dx);
}

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void max_pool2d<T>(const T*, T*, std::int64_t*, const PoolGeom&);                       \
  template void max_pool2d_backward<T>(const T*, const std::int64_t*, T*, const PoolGeom&);        \
  template void avg_pool2d<T>(const T*, T*, const PoolGeom&);                                      \
  template void avg_pool2d_backward<T>(const T*, T*, const PoolGeom&);                             \
  template void adaptive_avg_pool2d<T>(const T*, T*, const PoolGeom&);                             \
  template void adaptive_avg_pool2d_backward<T>(const T*, T*, const PoolGeom&);                    \
  template void batch_norm_train_stats<T>(const T*, const BnGeom&, double, double, T*, T*,         \
                                          double*, double*);                                       \
  template void batch_norm_eval_stats<T>(const T*, const T*, const BnGeom&, double, double*,       \
                                         double*);                                                 \
  template void batch_norm_apply<T>(const T*, const double*, const double*, const T*, const T*,    \
                                    const BnGeom&, T*);                                            \
  template void batch_norm_backward<T>(const T*, const T*, const double*, const double*, const T*, \
                                       const BnGeom&, bool, T*, T*, T*);                           \
  template void batch_norm_stats<T>(const T*, const BnGeom&, double*, double*);                    \
  template void batch_norm_backward_reduce<T>(const T*, const T*, const double*, const BnGeom&,    \
                                              double*, double*);                                   \
  template void batch_norm_backward_elemt<T>(const T*, const T*, const double*, const double*,     \
                                             const T*, const double*, const double*, double,       \
                                             const BnGeom&, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::ref
