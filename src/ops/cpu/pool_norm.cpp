// Fast CPU kernels of the pools: the shared bodies of src/ops/pool_norm_bodies.h (the CUDA
// kernels' own expressions), with the backward in gather form (each input element sums the
// outputs that reach it, so planes are independent and no write is shared; max pooling's
// backward scatters through the saved indices instead, the same sums), split over N·C planes on
// the calling thread's intra-op team (src/ops/cpu/channel_split.h) when there is enough work to
// pay for the hand-off. The split does not change any sum's order: results are the same for
// every thread count. Batch norm's kernels: src/ops/cpu/batch_norm.cpp.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/cpu/channel_split.h"
#include "ops/pool_norm_kernels.h"

namespace lockstep::kernels::cpu {

namespace {

namespace sh = ::lockstep::kernels::shared;
using detail::split;

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

#if defined(__SSE2__)
// Four float32 windows of MaxPool2d(2) at a time, rows a and b of a window row (output row starting
// at element `top` of the plane): the scalar loop's comparisons lane by lane, in its order (a0 a1
// b0 b1; an element replaces the maximum when greater or NaN) as and/andnot/or masks, the winner
// kept as a code 0-3 and turned into its index after. The scalar loop's compares became branches,
// mispredicted on every other window: a fifth of a CNN step (bench/RESULTS.md, issue 22). Returns
// the outputs done (a multiple of 4; the caller finishes the row).
std::int64_t max_pool_2x2_sse(const float* a, const float* b, std::int64_t top, std::int64_t in_w,
                              std::int64_t out_w, float* y, std::int64_t* index) {
  std::int64_t ow = 0;
  for (; ow + 4 <= out_w; ow += 4) {
    const __m128 a_lo = _mm_loadu_ps(a + 2 * ow), a_hi = _mm_loadu_ps(a + 2 * ow + 4);
    const __m128 b_lo = _mm_loadu_ps(b + 2 * ow), b_hi = _mm_loadu_ps(b + 2 * ow + 4);
    __m128 m = _mm_shuffle_ps(a_lo, a_hi, _MM_SHUFFLE(2, 0, 2, 0));
    __m128i code = _mm_setzero_si128();
    const auto take_max = [&](__m128 v, int k) {
      const __m128 take = _mm_or_ps(_mm_cmpgt_ps(v, m), _mm_cmpunord_ps(v, v));
      m = _mm_or_ps(_mm_and_ps(take, v), _mm_andnot_ps(take, m));
      const __m128i t = _mm_castps_si128(take);
      code = _mm_or_si128(_mm_and_si128(t, _mm_set1_epi32(k)), _mm_andnot_si128(t, code));
    };
    take_max(_mm_shuffle_ps(a_lo, a_hi, _MM_SHUFFLE(3, 1, 3, 1)), 1);
    take_max(_mm_shuffle_ps(b_lo, b_hi, _MM_SHUFFLE(2, 0, 2, 0)), 2);
    take_max(_mm_shuffle_ps(b_lo, b_hi, _MM_SHUFFLE(3, 1, 3, 1)), 3);
    _mm_storeu_ps(y + ow, m);
    alignas(16) std::int32_t c[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(c), code);
    for (int i = 0; i < 4; ++i)
      index[ow + i] = top + 2 * (ow + i) + (c[i] & 1) + (c[i] >> 1) * in_w;
  }
  return ow;
}
#endif

template <class T>
void max_pool_unpadded(const T* plane, const PoolGeom& g, T* y, std::int64_t* index) {
  if (g.k_h == 2 && g.k_w == 2 && g.s_h == 2 && g.s_w == 2) {  // MaxPool2d(2), the usual one
    for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
      const std::int64_t top = 2 * oh * g.in_w;
      std::int64_t ow = 0;
#if defined(__SSE2__)
      if constexpr (std::is_same_v<T, float>)
        ow = max_pool_2x2_sse(plane + top, plane + top + g.in_w, top, g.in_w, g.out_w,
                              y + oh * g.out_w, index + oh * g.out_w);
#endif
      for (; ow < g.out_w; ++ow) {
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

#define LOCKSTEP_INSTANTIATE(T)                                                                    \
  template void max_pool2d<T>(const T*, T*, std::int64_t*, const PoolGeom&);                       \
  template void max_pool2d_backward<T>(const T*, const std::int64_t*, T*, const PoolGeom&);        \
  template void avg_pool2d<T>(const T*, T*, const PoolGeom&);                                      \
  template void avg_pool2d_backward<T>(const T*, T*, const PoolGeom&);                             \
  template void adaptive_avg_pool2d<T>(const T*, T*, const PoolGeom&);                             \
  template void adaptive_avg_pool2d_backward<T>(const T*, T*, const PoolGeom&);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cpu
