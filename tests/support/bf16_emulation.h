// Hand-written emulation of autocast's bf16 linear/matmul (include/lockstep/ops/autocast.h) for
// the autocast tests on the CPU and the GPU: plain loops over host vectors, sums in double, the
// operands and every result rounded with round_to_bfloat16.
//
// With `dyadic` inputs (odd multiples of 1/8 in [-4, 4] plus a perturbation below 2^-13 that
// rounding to bf16 removes) every product of rounded operands is a multiple of 1/64 and every
// sum of up to 2^14 of them is exact in float32, so any summation order gives the same fp32 sum
// and the same rounded result: the library must then match the emulation bit for bit, while the
// fp32 result (perturbations kept, nothing rounded) differs.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing::bf16 {

inline float r(double v) { return round_to_bfloat16(static_cast<float>(v)); }

/// n values m/8 + d with m odd in [-31, 31] and 0 < d < 2^-13, from a fixed stream.
inline std::vector<float> dyadic(std::int64_t n, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int m = static_cast<int>((s >> 33) % 32) * 2 - 31;  // odd, -31..31
    const double d = static_cast<double>((s >> 13) % 1000 + 1) / 1001.0 * std::ldexp(1.0, -13);
    x = static_cast<float>(m / 8.0 + d);
  }
  return v;
}

inline Tensor make(const std::vector<float>& v, const Shape& shape) {
  return tensor(std::span<const float>(v), shape);
}

/// C[m, n] = r(Σ_k r(A[i, k]) r(B[k, j]) + r(bias[j])) for A [m, k], B [k, n] given as row-major
/// vectors; `bias` may be empty.
inline std::vector<float> gemm(const std::vector<float>& a, const std::vector<float>& b,
                               std::int64_t m, std::int64_t k, std::int64_t n,
                               const std::vector<float>& bias = {}) {
  std::vector<float> c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = bias.empty() ? 0.0 : static_cast<double>(r(bias[j]));
      for (std::int64_t p = 0; p < k; ++p)
        acc += static_cast<double>(r(a[i * k + p])) * static_cast<double>(r(b[p * n + j]));
      c[i * n + j] = r(acc);
    }
  return c;
}

/// Row-major transpose of a [rows, cols] matrix.
inline std::vector<float> transpose(const std::vector<float>& a, std::int64_t rows,
                                    std::int64_t cols) {
  std::vector<float> t(a.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}

/// What linear(x, w, b) and its gradients are under autocast, for y's gradient g.
struct LinearResult {
  std::vector<float> y, gx, gw, gb;
};

inline LinearResult linear(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>& b, const std::vector<float>& g,
                           std::int64_t rows, std::int64_t in, std::int64_t out) {
  LinearResult res;
  res.y = gemm(x, transpose(w, out, in), rows, in, out, b);
  res.gx = gemm(g, w, rows, out, in);                        // g̃ [rows, out] · W̃ [out, in]
  res.gw = gemm(transpose(g, rows, out), x, out, rows, in);  // g̃ᵀ [out, rows] · x̃ [rows, in]
  res.gb.resize(static_cast<std::size_t>(out));
  for (std::int64_t j = 0; j < out; ++j) {
    double acc = 0;
    for (std::int64_t i = 0; i < rows; ++i) acc += r(g[i * out + j]);
    res.gb[j] = r(acc);
  }
  return res;
}

/// Whether every element of a float32 tensor is a bf16 value (rounding leaves it unchanged).
inline bool all_bf16(const Tensor& t) {
  for (float v : t.to(cpu()).to_vector<float>())
    if (!std::isnan(v) && round_to_bfloat16(v) != v) return false;
  return true;
}

}  // namespace lockstep::testing::bf16
