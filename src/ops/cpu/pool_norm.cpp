// Fast CPU kernels of the pools and batch norm: the shared bodies of src/ops/pool_norm_bodies.h
// (the CUDA kernels' own expressions), with the backward in gather form (each input element
// sums the outputs that reach it, so planes are independent and no write is shared; max
// pooling's backward scatters through the saved indices instead, the same sums), split over
// N·C planes (pools) or channels (batch norm) on the calling thread's intra-op team
// (lockstep/core/parallel.h) when there is enough work to pay for the hand-off. The split does
// not change any sum's order: results are the same for every thread count.
#include <algorithm>
#include <limits>

#include "lockstep/core/parallel.h"
#include "ops/pool_norm_kernels.h"

namespace lockstep::kernels::cpu {

namespace {

namespace sh = ::lockstep::kernels::shared;

// Below this many element visits a kernel runs on the calling thread alone.
constexpr std::int64_t kParallelWork = std::int64_t{1} << 16;

// f(begin, end) over [0, items), in contiguous ranges, one per helper when work pays.
template <class F>
void split(std::int64_t items, std::int64_t work, const F& f) {
  const int threads = get_num_threads();
  const std::int64_t parts = std::min<std::int64_t>(threads, items);
  if (parts <= 1 || work < kParallelWork) {
    if (items > 0) f(std::int64_t{0}, items);
    return;
  }
  parallel_run(static_cast<int>(parts),
               [&](int i) { f(items * i / parts, items * (i + 1) / parts); });
}

std::int64_t window_work(const PoolGeom& g) {
  return g.planes * g.out_h * g.out_w * std::max<std::int64_t>(g.k_h * g.k_w, 1);
}

// Every output (forward) or input (backward) element of planes [p0, p1) through `one`.
template <class F>
void each_output(const PoolGeom& g, std::int64_t work, const F& one) {
  split(g.planes, work, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p)
      for (std::int64_t oh = 0; oh < g.out_h; ++oh)
        for (std::int64_t ow = 0; ow < g.out_w; ++ow) one(p, oh, ow);
  });
}
template <class F>
void each_input(const PoolGeom& g, std::int64_t work, const F& one) {
  split(g.planes, work, [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p)
      for (std::int64_t h = 0; h < g.in_h; ++h)
        for (std::int64_t w = 0; w < g.in_w; ++w) one(p, h, w);
  });
}

}  // namespace

namespace {

// Σ f(i) for i in [0, count) in double, in 8 interleaved partial sums added pairwise at the end:
// one fixed order (so the same bits on every thread count) that keeps 8 additions in flight
// instead of one dependency chain.
template <class F>
inline double sum8(std::int64_t count, const F& f) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += f(i + l);
  for (int l = 0; i < count; ++i, ++l) acc[l] += f(i);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Without padding every window lies inside the image (floor mode), so the bounds of
// sh::max_pool_one need no clamping: the same comparisons in the same order (row-major, greater
// or NaN replaces), in a loop the compiler can keep in registers.
// One comparison of the window scan: v at `at` replaces the maximum when greater or NaN.
template <class T>
inline void take_max(T v, std::int64_t at, T& m, std::int64_t& best) {
  const bool take = (v > m) | (v != v);  // selects, not branches: the winner is unpredictable
  m = take ? v : m;
  best = take ? at : best;
}

template <class T>
void max_pool_unpadded(const T* plane, const PoolGeom& g, T* y, std::int64_t* index) {
  if (g.k_h == 2 && g.k_w == 2 && g.s_h == 2 && g.s_w == 2) {  // MaxPool2d(2), the usual one
    for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
      const std::int64_t top = 2 * oh * g.in_w;
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        const std::int64_t a = top + 2 * ow, b = a + g.in_w;
        T m = plane[a];  // -inf < v for every v but -inf and NaN: the first element is taken
        std::int64_t best = a;
        take_max(plane[a + 1], a + 1, m, best);
        take_max(plane[b], b, m, best);
        take_max(plane[b + 1], b + 1, m, best);
        y[oh * g.out_w + ow] = m;
        index[oh * g.out_w + ow] = best;
      }
    }
    return;
  }
  for (std::int64_t oh = 0; oh < g.out_h; ++oh)
    for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
      const std::int64_t h0 = oh * g.s_h, w0 = ow * g.s_w;
      std::int64_t best = h0 * g.in_w + w0;
      T m = -std::numeric_limits<T>::infinity();
      for (std::int64_t h = h0; h < h0 + g.k_h; ++h) {
        const T* row = plane + h * g.in_w;
        for (std::int64_t w = w0; w < w0 + g.k_w; ++w) take_max(row[w], h * g.in_w + w, m, best);
      }
      y[oh * g.out_w + ow] = m;
      index[oh * g.out_w + ow] = best;
    }
}

}  // namespace

template <class T>
void max_pool2d(const T* x, T* y, std::int64_t* index, const PoolGeom& g) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  if (g.p_h == 0 && g.p_w == 0) {
    split(g.planes, window_work(g), [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p)
        max_pool_unpadded(x + p * ip, g, y + p * op, index + p * op);
    });
    return;
  }
  each_output(g, window_work(g), [&](std::int64_t p, std::int64_t oh, std::int64_t ow) {
    const std::int64_t o = p * op + oh * g.out_w + ow;
    sh::max_pool_one(x + p * ip, g, oh, ow, y + o, index + o);
  });
}

// Scatter form, plane by plane: gx[index[o]] += gy[o] over the outputs o in increasing order
// (PyTorch's cpu_max_pool_backward). Each input element receives its outputs' gradients in the
// order the gather form (sh::max_pool_grad_one, the CUDA kernel's) adds them, starting from 0,
// so the bits are the same — without the per-input search for the windows that hold it.
template <class T>
void max_pool2d_backward(const T* gy, const std::int64_t* index, T* gx, const PoolGeom& g) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  split(g.planes, g.planes * (ip + op), [&](std::int64_t p0, std::int64_t p1) {
    for (std::int64_t p = p0; p < p1; ++p) {
      T* gxp = gx + p * ip;
      const T* gyp = gy + p * op;
      const std::int64_t* ixp = index + p * op;
      std::fill(gxp, gxp + ip, T(0));
      for (std::int64_t o = 0; o < op; ++o) gxp[ixp[o]] += gyp[o];
    }
  });
}

template <class T>
void avg_pool2d(const T* x, T* y, const PoolGeom& g) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  each_output(g, window_work(g), [&](std::int64_t p, std::int64_t oh, std::int64_t ow) {
    y[p * op + oh * g.out_w + ow] = sh::avg_pool_one(x + p * ip, g, oh, ow);
  });
}

template <class T>
void avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  each_input(g, window_work(g), [&](std::int64_t p, std::int64_t h, std::int64_t w) {
    gx[p * ip + h * g.in_w + w] = sh::avg_pool_grad_one(gy + p * op, g, h, w);
  });
}

template <class T>
void adaptive_avg_pool2d(const T* x, T* y, const PoolGeom& g) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  each_output(g, g.planes * std::max(ip, op),
              [&](std::int64_t p, std::int64_t oh, std::int64_t ow) {
                y[p * op + oh * g.out_w + ow] = sh::adaptive_avg_one(x + p * ip, g, oh, ow);
              });
}

template <class T>
void adaptive_avg_pool2d_backward(const T* gy, T* gx, const PoolGeom& g) {
  const std::int64_t ip = g.in_h * g.in_w, op = g.out_h * g.out_w;
  each_input(g, g.planes * std::max(ip, op), [&](std::int64_t p, std::int64_t h, std::int64_t w) {
    gx[p * ip + h * g.in_w + w] = sh::adaptive_avg_grad_one(gy + p * op, g, h, w);
  });
}

// ---- batch norm: channels split over the team; each channel's sums in (n, spatial) order ------

template <class T>
void batch_norm_train_stats(const T* x, const BnGeom& g, double eps, double momentum,
                            T* running_mean, T* running_var, double* mean, double* invstd) {
  const double m = static_cast<double>(g.n * g.spatial);
  split(g.c, g.n * g.c * g.spatial * 2, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for (std::int64_t n = 0; n < g.n; ++n) {
        const T* row = x + (n * g.c + c) * g.spatial;
        sum += sum8(g.spatial, [row](std::int64_t s) { return static_cast<double>(row[s]); });
      }
      const double mu = sum / m;
      double var_sum = 0;
      for (std::int64_t n = 0; n < g.n; ++n) {
        const T* row = x + (n * g.c + c) * g.spatial;
        var_sum += sum8(g.spatial, [row, mu](std::int64_t s) {
          const double d = static_cast<double>(row[s]) - mu;
          return d * d;
        });
      }
      mean[c] = mu;
      invstd[c] = sh::bn_invstd(var_sum / m, eps);
      if (running_mean)
        running_mean[c] =
            static_cast<T>(sh::bn_running(static_cast<double>(running_mean[c]), mu, momentum));
      if (running_var)
        running_var[c] = static_cast<T>(
            sh::bn_running(static_cast<double>(running_var[c]), var_sum / (m - 1), momentum));
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
  split(g.c, g.n * g.c * g.spatial, [&](std::int64_t c0, std::int64_t c1) {
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
  split(g.c, g.n * g.c * g.spatial * 2, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      double sum = 0, dot = 0;
      const double mu = mean[c];
      for (std::int64_t n = 0; n < g.n; ++n) {
        const T* d = dy + (n * g.c + c) * g.spatial;
        const T* xr = x + (n * g.c + c) * g.spatial;
        sum += sum8(g.spatial, [d](std::int64_t s) { return static_cast<double>(d[s]); });
        dot += sum8(g.spatial, [d, xr, mu](std::int64_t s) {
          return static_cast<double>(d[s]) * (static_cast<double>(xr[s]) - mu);
        });
      }
      if (dw) dw[c] = static_cast<T>(dot * invstd[c]);
      if (db) db[c] = static_cast<T>(sum);
      if (!dx) continue;
      const auto q = sh::bn_grad_coeffs<T>(mean[c], invstd[c], sum, dot, m, w, c, training);
      for (std::int64_t n = 0; n < g.n; ++n) {
        const std::int64_t base = (n * g.c + c) * g.spatial;
        for (std::int64_t s = 0; s < g.spatial; ++s)
          dx[base + s] = sh::bn_grad_one(dy[base + s], x[base + s], q, training);
      }
    }
  });
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
                                       const BnGeom&, bool, T*, T*, T*);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cpu
