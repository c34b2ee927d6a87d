// Fast conv2d kernels: im2col + GEMM per sample and group, the structure of Caffe's
// BaseConvolutionLayer (forward_cpu_gemm / backward_cpu_gemm / weight_cpu_gemm,
// BVLC/caffe:src/caffe/layers/base_conv_layer.cpp) and of PyTorch's slow_conv2d
// (pytorch/pytorch:aten/src/ATen/native/ConvolutionMM2d.cpp). For sample n and group g, with
// K = C_in/groups · kH · kW and P = H_out · W_out:
//   col  [K, P]  = im2col(x[n], g)                  (row (c·kH + p)·kW + q, column i·W_out + j)
//   y    [C_out/groups, P] = w_g [C_out/groups, K] · col  (+ bias, preset, beta = 1)
//   col  = w_gᵀ · gy_g, then gx[n] = col2im(col)    (backward input)
//   gw_g += gy_g · colᵀ                             (backward weight: samples in order within
//                                                    chunks of 8, the chunks' sums in order)
// A 1×1 kernel with stride 1 and no padding uses x[n] itself as col. GEMMs go through
// kernels::cpu::gemm (OpenBLAS, or the small-product loop). Forward and backward input run
// samples in parallel over the calling thread's intra-op team (lockstep/core/parallel.h), each
// task single-threaded inside; the result of a sample does not depend on the split. The weight
// gradient's chunks run in parallel the same way. No bit depends on the thread count.
#include <algorithm>
#include <vector>

#include "lockstep/core/parallel.h"
#include "ops/conv_kernels.h"
#include "ops/cpu/one_thread.h"
#include "ops/kernels.h"

namespace lockstep::kernels::cpu {

namespace {

// Below this many multiply-adds per call the samples run on the calling thread.
constexpr std::int64_t kParallelMacs = std::int64_t(1) << 18;
// The weight gradient sums samples in chunks of this many (one partial sum each), a constant so
// that the summation order depends on N only (deterministic mode's shards of 8: one chunk).
constexpr std::int64_t kWeightChunk = 8;

bool direct_1x1(const Conv2dGeom& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 &&
         g.pad_w == 0;
}

// The output columns j whose input column j·s − pad + off lies in [0, w): [lo, hi).
void valid_range(std::int64_t out, std::int64_t stride, std::int64_t pad, std::int64_t off,
                 std::int64_t w, std::int64_t& lo, std::int64_t& hi) {
  // smallest j with j·stride ≥ pad − off, largest j with j·stride ≤ w − 1 + pad − off
  const std::int64_t a = pad - off, b = w - 1 + pad - off;
  lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  hi = b < 0 ? 0 : std::min(out, b / stride + 1);
  if (hi < lo) hi = lo;
}

// col [K, P] of one sample's group: xg points at its first input channel [cin_g, h, w].
template <class T>
void im2col(const Conv2dGeom& g, const T* xg, T* col) {
  const std::int64_t ow = g.out_w, P = g.out_hw();
  for (std::int64_t c = 0; c < g.cin_g(); ++c)
    for (std::int64_t p = 0; p < g.kh; ++p)
      for (std::int64_t q = 0; q < g.kw; ++q) {
        T* row = col + ((c * g.kh + p) * g.kw + q) * P;
        std::int64_t jlo, jhi;
        valid_range(ow, g.stride_w, g.pad_w, q * g.dil_w, g.w, jlo, jhi);
        for (std::int64_t i = 0; i < g.out_h; ++i) {
          T* out = row + i * ow;
          const std::int64_t r = i * g.stride_h - g.pad_h + p * g.dil_h;
          if (r < 0 || r >= g.h) {
            std::fill(out, out + ow, T(0));
            continue;
          }
          // input column of output column j: j·stride + off (inside the row for j in [lo, hi))
          const T* in = xg + (c * g.h + r) * g.w;
          const std::int64_t off = q * g.dil_w - g.pad_w;
          std::fill(out, out + jlo, T(0));
          if (g.stride_w == 1 && jhi > jlo)
            std::copy(in + (jlo + off), in + (jhi + off), out + jlo);
          else
            for (std::int64_t j = jlo; j < jhi; ++j) out[j] = in[j * g.stride_w + off];
          std::fill(out + jhi, out + ow, T(0));
        }
      }
}

// gxg [cin_g, h, w] += col2im(col): the adjoint of im2col.
template <class T>
void col2im_add(const Conv2dGeom& g, const T* col, T* gxg) {
  const std::int64_t ow = g.out_w, P = g.out_hw();
  for (std::int64_t c = 0; c < g.cin_g(); ++c)
    for (std::int64_t p = 0; p < g.kh; ++p)
      for (std::int64_t q = 0; q < g.kw; ++q) {
        const T* row = col + ((c * g.kh + p) * g.kw + q) * P;
        std::int64_t jlo, jhi;
        valid_range(ow, g.stride_w, g.pad_w, q * g.dil_w, g.w, jlo, jhi);
        for (std::int64_t i = 0; i < g.out_h; ++i) {
          const std::int64_t r = i * g.stride_h - g.pad_h + p * g.dil_h;
          if (r < 0 || r >= g.h) continue;
          T* out = gxg + (c * g.h + r) * g.w;
          const std::int64_t off = q * g.dil_w - g.pad_w;
          const T* in = row + i * ow;
          for (std::int64_t j = jlo; j < jhi; ++j) out[j * g.stride_w + off] += in[j];
        }
      }
}

// Runs body(lo, hi, col) over samples [0, n): in contiguous blocks on the team when the call is
// large enough, else on the calling thread. `col` is a scratch buffer of col_elems per task.
template <class T, class Body>
void for_samples(const Conv2dGeom& g, std::int64_t col_elems, Body body) {
  const std::int64_t macs = g.n * g.c_out * g.col_rows() * g.out_hw();
  const int parts = static_cast<int>(std::min<std::int64_t>(get_num_threads(), g.n));
  if (parts <= 1 || macs < kParallelMacs) {
    std::vector<T> col(static_cast<std::size_t>(col_elems));
    body(0, g.n, col.data());
    return;
  }
  parallel_run(parts, [&](int t) {
    OneThread one;
    std::vector<T> col(static_cast<std::size_t>(col_elems));
    body(g.n * t / parts, g.n * (t + 1) / parts, col.data());
  });
}

}  // namespace

template <class T>
void conv2d_forward(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y) {
  const std::int64_t K = g.col_rows(), P = g.out_hw(), cog = g.cout_g(), cig = g.cin_g();
  const bool direct = direct_1x1(g);
  for_samples<T>(g, direct ? 0 : K * P, [&](std::int64_t lo, std::int64_t hi, T* col) {
    for (std::int64_t n = lo; n < hi; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        const T* xg = x + (n * g.c_in + grp * cig) * g.h * g.w;
        T* yg = y + (n * g.c_out + grp * cog) * P;
        if (!direct) im2col(g, xg, col);
        if (bias)
          for (std::int64_t o = 0; o < cog; ++o)
            std::fill(yg + o * P, yg + (o + 1) * P, bias[grp * cog + o]);
        gemm<T>(false, false, cog, P, K, T(1), w + grp * cog * K, K, direct ? xg : col, P,
                bias ? T(1) : T(0), yg, P);
      }
  });
}

template <class T>
void conv2d_backward_input(const Conv2dGeom& g, const T* gy, const T* w, T* gx) {
  const std::int64_t K = g.col_rows(), P = g.out_hw(), cog = g.cout_g(), cig = g.cin_g();
  const bool direct = direct_1x1(g);
  for_samples<T>(g, direct ? 0 : K * P, [&](std::int64_t lo, std::int64_t hi, T* col) {
    for (std::int64_t n = lo; n < hi; ++n)
      for (std::int64_t grp = 0; grp < g.groups; ++grp) {
        const T* gyg = gy + (n * g.c_out + grp * cog) * P;
        T* gxg = gx + (n * g.c_in + grp * cig) * g.h * g.w;
        if (direct) {  // gx_g [cig, P] = w_gᵀ · gy_g
          gemm<T>(true, false, cig, P, cog, T(1), w + grp * cog * K, K, gyg, P, T(0), gxg, P);
          continue;
        }
        gemm<T>(true, false, K, P, cog, T(1), w + grp * cog * K, K, gyg, P, T(0), col, P);
        std::fill(gxg, gxg + cig * g.h * g.w, T(0));
        col2im_add(g, col, gxg);
      }
  });
}

// Σ row[0..len) in a fixed order: 8 interleaved partial sums (vectorisable without
// reassociation), then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the tail.
template <class T>
T row_sum(const T* row, std::int64_t len) {
  T s[8] = {};
  std::int64_t k = 0;
  for (; k + 8 <= len; k += 8)
    for (int l = 0; l < 8; ++l) s[l] += row[k + l];
  T total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; k < len; ++k) total += row[k];
  return total;
}

template <class T>
void conv2d_backward_weight(const Conv2dGeom& g, const T* gy, const T* x, T* gw, T* gb) {
  const std::int64_t K = g.col_rows(), P = g.out_hw(), cog = g.cout_g(), cig = g.cin_g();
  const bool direct = direct_1x1(g);
  const std::int64_t col_elems = gw && !direct ? K * P : 0;
  // The sums over samples [lo, hi) into pw (weight) and pb (bias), samples in order.
  auto chunk_sum = [&](std::int64_t lo, std::int64_t hi, T* pw, T* pb, T* col) {
    for (std::int64_t n = lo; n < hi; ++n) {
      for (std::int64_t grp = 0; pw && grp < g.groups; ++grp) {
        const T* xg = x + (n * g.c_in + grp * cig) * g.h * g.w;
        if (!direct) im2col(g, xg, col);
        gemm<T>(false, true, cog, K, P, T(1), gy + (n * g.c_out + grp * cog) * P, P,
                direct ? xg : col, P, n == lo ? T(0) : T(1), pw + grp * cog * K, K);
      }
      for (std::int64_t o = 0; pb && o < g.c_out; ++o) {
        const T s = row_sum(gy + (n * g.c_out + o) * P, P);
        pb[o] = n == lo ? s : pb[o] + s;
      }
    }
  };
  const std::int64_t chunks = (g.n + kWeightChunk - 1) / kWeightChunk;
  if (chunks == 0) {  // no sample: zero sums
    if (gw) std::fill(gw, gw + g.w_numel(), T(0));
    if (gb) std::fill(gb, gb + g.c_out, T(0));
  } else if (chunks == 1) {
    // On the calling thread alone: a GEMM split over the team (rows or columns of C) hands
    // OpenBLAS other tile shapes, and on some CPUs (seen on AMD EPYC, OpenBLAS 0.3.21) its edge
    // kernels sum in another order, so the bits would depend on the thread count.
    OneThread one;
    std::vector<T> col(static_cast<std::size_t>(col_elems));
    chunk_sum(0, g.n, gw, gb, col.data());
  } else {
    // One partial sum per chunk of kWeightChunk samples, chunks spread over the team, then
    // gw = ((p0 + p1) + p2) + ... in chunk order: the bits depend on N, not on the threads.
    const std::int64_t wn = gw ? g.w_numel() : 0, bn = gb ? g.c_out : 0;
    std::vector<T> pw(static_cast<std::size_t>(chunks * wn)),
        pb(static_cast<std::size_t>(chunks * bn));
    auto run_chunks = [&](std::int64_t c0, std::int64_t c1) {
      std::vector<T> col(static_cast<std::size_t>(col_elems));
      for (std::int64_t c = c0; c < c1; ++c)
        chunk_sum(c * kWeightChunk, std::min(g.n, (c + 1) * kWeightChunk),
                  gw ? &pw[c * wn] : nullptr, gb ? &pb[c * bn] : nullptr, col.data());
    };
    const int parts = static_cast<int>(std::min<std::int64_t>(get_num_threads(), chunks));
    if (parts <= 1 || g.n * g.c_out * K * P < kParallelMacs) {
      run_chunks(0, chunks);
    } else {
      parallel_run(parts, [&](int t) {
        OneThread one;
        run_chunks(chunks * t / parts, chunks * (t + 1) / parts);
      });
    }
    auto reduce = [&](const std::vector<T>& part, std::int64_t len, T* out) {
      std::copy(part.begin(), part.begin() + len, out);
      for (std::int64_t c = 1; c < chunks; ++c)
        for (std::int64_t k = 0; k < len; ++k) out[k] += part[c * len + k];
    };
    if (gw) reduce(pw, wn, gw);
    if (gb) reduce(pb, bn, gb);
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

}  // namespace lockstep::kernels::cpu
