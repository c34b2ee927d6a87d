// Reference conv2d kernels: the definition of torch.nn.functional.conv2d (cross-correlation,
// zero padding, dilation, groups) written as plain loops, and its two gradients written as the
// same loops with the products routed the other way. The oracle of src/ops/cpu/conv.cpp.
#include "ops/conv_kernels.h"

namespace lockstep::kernels::ref {

namespace {

// Calls f(yi, xi, wi) for every term x[xi]·w[wi] of output y[yi], over samples n, output
// channels o and output pixels (i, j), then input channels c of o's group and kernel taps (p, q)
// whose input pixel (i·s0 − p0 + p·d0, j·s1 − p1 + q·d1) lies inside the image; padded positions
// contribute zero and are skipped. Terms of one output are visited in order c, p, q.
template <class F>
void for_each_term(const Conv2dGeom& g, F f) {
  const std::int64_t cig = g.cin_g(), cog = g.cout_g();
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t o = 0; o < g.c_out; ++o) {
      const std::int64_t grp = o / cog;
      for (std::int64_t i = 0; i < g.out_h; ++i)
        for (std::int64_t j = 0; j < g.out_w; ++j) {
          const std::int64_t yi = ((n * g.c_out + o) * g.out_h + i) * g.out_w + j;
          for (std::int64_t c = 0; c < cig; ++c)
            for (std::int64_t p = 0; p < g.kh; ++p) {
              const std::int64_t r = i * g.stride_h - g.pad_h + p * g.dil_h;
              if (r < 0 || r >= g.h) continue;
              for (std::int64_t q = 0; q < g.kw; ++q) {
                const std::int64_t s = j * g.stride_w - g.pad_w + q * g.dil_w;
                if (s < 0 || s >= g.w) continue;
                const std::int64_t xi = ((n * g.c_in + grp * cig + c) * g.h + r) * g.w + s;
                const std::int64_t wi = ((o * cig + c) * g.kh + p) * g.kw + q;
                f(yi, xi, wi);
              }
            }
        }
    }
}

}  // namespace

template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y) {
  const std::int64_t hw = g.out_hw();
  for (std::int64_t k = 0; k < g.y_numel(); ++k) y[k] = bias ? bias[(k / hw) % g.c_out] : T(0);
  for_each_term(g,
                [&](std::int64_t yi, std::int64_t xi, std::int64_t wi) { y[yi] += x[xi] * w[wi]; });
}

template <class T>
void conv2d_backward_input(const Conv2dGeom& g, const T* gy, const T* w, T* gx) {
  for (std::int64_t k = 0; k < g.x_numel(); ++k) gx[k] = T(0);
  for_each_term(
      g, [&](std::int64_t yi, std::int64_t xi, std::int64_t wi) { gx[xi] += gy[yi] * w[wi]; });
}

template <class T>
void conv2d_backward_weight(const Conv2dGeom& g, const T* gy, const T* x, T* gw, T* gb) {
  if (gw) {
    for (std::int64_t k = 0; k < g.w_numel(); ++k) gw[k] = T(0);
    for_each_term(
        g, [&](std::int64_t yi, std::int64_t xi, std::int64_t wi) { gw[wi] += gy[yi] * x[xi]; });
  }
  if (gb) {
    const std::int64_t hw = g.out_hw();
    for (std::int64_t o = 0; o < g.c_out; ++o) gb[o] = T(0);
    for (std::int64_t k = 0; k < g.y_numel(); ++k) gb[(k / hw) % g.c_out] += gy[k];
  }
}

template void conv2d_forward<float>(const Conv2dGeom&, const float*, const float*, const float*,
                                    float*);
template void conv2d_forward<double>(const Conv2dGeom&, const double*, const double*, const double*,
                                     double*);
template void conv2d_backward_input<float>(const Conv2dGeom&, const float*, const float*, float*);
template void conv2d_backward_input<double>(const Conv2dGeom&, const double*, const double*,
                                            double*);
template void conv2d_backward_weight<float>(const Conv2dGeom&, const float*, const float*, float*,
                                            float*);
template void conv2d_backward_weight<double>(const Conv2dGeom&, const double*, const double*,
                                             double*, double*);

}  // namespace lockstep::kernels::ref
