// Small GEMM without BLAS: for products of a few thousand multiply-adds (the reference model's
// 32×10×5 layers), OpenBLAS spends most of a call on packing, its buffer mutex and dispatch
// (~300–700 ns per call measured here, against ~100–400 ns for this loop; bench/RESULTS.md).
//
// Every element of C is one sum over p = 0..k-1 in that order, started from zero and rounded
// after each multiply and each add (no FMA), then C = alpha·sum + beta·C. So an element's bits
// depend on its own row of op(A) and column of op(B) only — not on M, N, the tile it falls in,
// or the orientation chosen below — which keeps deterministic DataParallel (fixed shards)
// independent of the device count. The loop is compiled twice, for SSE2 (the x86-64 baseline: a
// tile is two 16-byte registers) and for AVX (one 32-byte register, chosen at run time when the
// CPU has it); both compute the same operations in the same order, so their bits are equal
// (tested).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace lockstep::kernels::cpu::small {

/// One SIMD register of VB bytes (16: SSE2, 32: AVX) holding T.
template <class T, int VB>
struct Vec {
  typedef T type __attribute__((vector_size(VB)));
  static constexpr int lanes = VB / static_cast<int>(sizeof(T));
};

enum class Isa { Auto, Sse2, Avx };

/// Columns per tile (32 bytes: two SSE2 registers or one AVX register) and the packed-panel
/// capacity (16 KB on the stack).
template <class T>
inline constexpr int kTile = 32 / static_cast<int>(sizeof(T));
template <class T>
inline constexpr std::int64_t kPanel = 16384 / sizeof(T);
/// Largest padded product (rows × columns rounded up to kTile, × K) sent here; above it
/// OpenBLAS is as fast or faster (measured break-even between 4k and 10k on this machine).
inline constexpr std::int64_t kMaxPaddedMacs = std::int64_t(1) << 13;

// out[r][0..W) = Σ_p a(r, p) · panel[p·ps + 0..W) for R rows, p in order; NV = W / lanes
// registers per row.
template <class T, int VB, int R>
[[gnu::always_inline]] inline void tile(const T* a, std::int64_t ar, std::int64_t ac,
                                        const T* panel, std::int64_t ps, std::int64_t k, T* out) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes, NV = kTile<T> / L;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  for (std::int64_t p = 0; p < k; ++p) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], panel + p * ps + v * L, sizeof(V));
    for (int r = 0; r < R; ++r) {
      const T av = a[r * ar + p * ac];
      for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  }
  std::memcpy(out, acc, sizeof(acc));
}

// D[M,N] = A'[M,k] B'[k,N] with A'(i,p) = a[i·ar + p·ac] and B'(p,j) = b[p·bp + j·bj]; element
// (i,j) of C lives at c[i·rs + j·cs] and becomes alpha·D + beta·C (C not read when beta == 0),
// plus bias[i·vr + j·vc] when bias is given (then alpha == 1 and beta == 0: C = D + bias).
template <class T, int VB>
[[gnu::always_inline]] inline void kernel(std::int64_t M, std::int64_t N, std::int64_t k, T alpha,
                                          const T* a, std::int64_t ar, std::int64_t ac, const T* b,
                                          std::int64_t bp, std::int64_t bj, T beta, T* c,
                                          std::int64_t rs, std::int64_t cs, const T* bias,
                                          std::int64_t vr, std::int64_t vc) {
  constexpr int W = kTile<T>;
  alignas(64) T panel[kPanel<T>];
  alignas(64) T out[4 * W];
  const std::int64_t tiles = (N + W - 1) / W;
  // B' packed as [tile][p][W], zero-padded; a B' with contiguous rows and whole tiles is read in
  // place (tile t, row p at b + p·bp + t·W).
  const bool direct = bj == 1 && N % W == 0;
  for (std::int64_t t = 0; t < tiles && !direct; ++t) {
    const std::int64_t j0 = t * W, w = std::min<std::int64_t>(W, N - j0);
    T* pt = panel + t * k * W;
    for (std::int64_t p = 0; p < k; ++p) {
      T* row = pt + p * W;
      const T* src = b + p * bp + j0 * bj;
      if (w == W && bj == 1)
        std::memcpy(row, src, sizeof(T) * W);  // fixed size: inlined, not a call
      else
        for (int j = 0; j < W; ++j) row[j] = j < w ? src[j * bj] : T(0);
    }
  }
  // How results reach C, decided once: plain copy, + bias, or the general alpha/beta update.
  const int mode = bias ? 1 : (alpha == T(1) && beta == T(0)) ? 0 : 2;
  auto store = [&](std::int64_t i, int rows, std::int64_t t) {
    const std::int64_t j0 = t * W, w = std::min<std::int64_t>(W, N - j0);
    for (int r = 0; r < rows; ++r) {
      T* cr = c + (i + r) * rs + j0 * cs;
      const T* o = out + r * W;
      if (mode == 0) {
        for (std::int64_t j = 0; j < w; ++j) cr[j * cs] = o[j];
      } else if (mode == 1) {
        const T* v = bias + (i + r) * vr + j0 * vc;
        for (std::int64_t j = 0; j < w; ++j) cr[j * cs] = o[j] + v[j * vc];
      } else if (beta == T(0)) {
        for (std::int64_t j = 0; j < w; ++j) cr[j * cs] = alpha * o[j];
      } else {
        for (std::int64_t j = 0; j < w; ++j) cr[j * cs] = alpha * o[j] + beta * cr[j * cs];
      }
    }
  };
  const std::int64_t ps = direct ? bp : W;
  auto tile_at = [&](std::int64_t t) { return direct ? b + t * W : panel + t * k * W; };
  std::int64_t i = 0;
  for (; i + 4 <= M; i += 4)
    for (std::int64_t t = 0; t < tiles; ++t) {
      tile<T, VB, 4>(a + i * ar, ar, ac, tile_at(t), ps, k, out);
      store(i, 4, t);
    }
  const int rest = static_cast<int>(M - i);
  if (rest > 0)
    for (std::int64_t t = 0; t < tiles; ++t) {
      const T* pt = tile_at(t);
      if (rest == 1)
        tile<T, VB, 1>(a + i * ar, ar, ac, pt, ps, k, out);
      else if (rest == 2)
        tile<T, VB, 2>(a + i * ar, ar, ac, pt, ps, k, out);
      else
        tile<T, VB, 3>(a + i * ar, ar, ac, pt, ps, k, out);
      store(i, rest, t);
    }
}

// The two compiled copies: the always_inline body above takes the instruction set of the
// function it is inlined into.
template <class T>
void kernel_sse2(std::int64_t M, std::int64_t N, std::int64_t k, T alpha, const T* a,
                 std::int64_t ar, std::int64_t ac, const T* b, std::int64_t bp, std::int64_t bj,
                 T beta, T* c, std::int64_t rs, std::int64_t cs, const T* bias, std::int64_t vr,
                 std::int64_t vc) {
  kernel<T, 16>(M, N, k, alpha, a, ar, ac, b, bp, bj, beta, c, rs, cs, bias, vr, vc);
}
template <class T>
[[gnu::target("avx")]] void kernel_avx(std::int64_t M, std::int64_t N, std::int64_t k, T alpha,
                                       const T* a, std::int64_t ar, std::int64_t ac, const T* b,
                                       std::int64_t bp, std::int64_t bj, T beta, T* c,
                                       std::int64_t rs, std::int64_t cs, const T* bias,
                                       std::int64_t vr, std::int64_t vc) {
  kernel<T, 32>(M, N, k, alpha, a, ar, ac, b, bp, bj, beta, c, rs, cs, bias, vr, vc);
}

inline bool cpu_has_avx() {
  static const bool has = __builtin_cpu_supports("avx");
  return has;
}

inline std::int64_t round_up(std::int64_t v, std::int64_t w) { return (v + w - 1) / w * w; }

/// C[m,n] = alpha·op(A)·op(B) + beta·C (row-major, as cblas_?gemm) when the product is small
/// enough; returns false (C untouched) otherwise. Needs m, n, k ≥ 1. The kernel tiles C's columns
/// in kTile-column tiles, or computes Cᵀ = op(B)ᵀ op(A)ᵀ and tiles its columns (C's rows),
/// whichever the instruction-count estimate below finds cheaper (padding, packing, stores); the
/// bits of each element do not depend on this choice.
/// With `bias` (length n; then alpha must be 1 and beta 0): C = op(A)·op(B) + bias per column,
/// rounded as BLAS with C preset to bias and beta = 1 would (one add after the sum).
/// `isa` picks the compiled copy (Auto: AVX when the CPU has it); tests compare the two.
template <class T>
bool gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc,
          const T* bias = nullptr, Isa isa = Isa::Auto) {
  constexpr int W = kTile<T>;
  // op(A)(i,p) = a[i·sa_i + p·sa_p]; op(B)(p,j) = b[p·sb_p + j·sb_j]
  const std::int64_t sa_i = ta ? 1 : lda, sa_p = ta ? lda : 1;
  const std::int64_t sb_p = tb ? 1 : ldb, sb_j = tb ? ldb : 1;
  // Rough instruction counts of the two orientations (measured with callgrind): ~8 per row and
  // tile column of the inner loop (per k), ~6 per packed panel element, ~5 per stored element
  // (~3 when C's rows are contiguous in the kernel's column direction).
  auto cost = [&](std::int64_t rows, std::int64_t cols, bool packed, bool contiguous) {
    return round_up(cols, W) / W * (rows * 8 + 4) * k + (packed ? round_up(cols, W) * k * 6 : 0) +
           rows * cols * (contiguous ? 3 : 5);
  };
  const std::int64_t normal = cost(m, n, !(sb_j == 1 && n % W == 0), true);
  const std::int64_t swapped = cost(n, m, !(sa_i == 1 && m % W == 0), false);
  const bool swap = swapped < normal;
  if ((swap ? round_up(m, W) * n : round_up(n, W) * m) > kMaxPaddedMacs / k) return false;
  if ((swap ? round_up(m, W) : round_up(n, W)) > kPanel<T> / k) return false;
  const bool avx = isa == Isa::Avx || (isa == Isa::Auto && cpu_has_avx());
  auto run = avx ? &kernel_avx<T> : &kernel_sse2<T>;
  if (swap)  // Cᵀ[n,m] = op(B)ᵀ op(A)ᵀ; a·b == b·a exactly, so the bits are the same
    run(n, m, k, alpha, b, sb_j, sb_p, a, sa_p, sa_i, beta, c, 1, ldc, bias, 1, 0);
  else
    run(m, n, k, alpha, a, sa_i, sa_p, b, sb_p, sb_j, beta, c, ldc, 1, bias, 0, 1);
  return true;
}

}  // namespace lockstep::kernels::cpu::small
