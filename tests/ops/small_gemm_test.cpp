// The fast GEMM entry (kernels::cpu::gemm: the register-tiled small-product loop of
// src/ops/cpu/small_gemm.h below its size limit, OpenBLAS above it) against the double-precision
// reference loop, for every transpose combination, padded leading dimensions, alpha/beta and both
// dtypes; the fused linear kernel (bias added as results are stored) against its reference; and
// the small loop's determinism promise: an element's bits do not depend on how many rows or
// columns the product has (deterministic DataParallel relies on it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/small_gemm.h"
#include "ops/kernels.h"

namespace lockstep::testing {
namespace {

namespace k = lockstep::kernels;

struct Shape3 {
  std::int64_t m, n, k;
};

// Shapes of the reference model's five GEMMs, odd and size-1 ones, and two above the small limit.
const Shape3 kShapes[] = {{1, 1, 1},  {32, 5, 10}, {32, 2, 5},  {2, 5, 32},  {32, 5, 2},
                          {5, 10, 32}, {3, 5, 7},  {17, 9, 3}, {9, 17, 33}, {7, 1, 13},
                          {1, 24, 6},  {8, 16, 4}, {64, 64, 64}, {128, 10, 256}};

template <class T>
std::vector<T> random_vector(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<double> d;
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

// Runs C = alpha·op(A)·op(B) + beta·C through cpu::gemm and ref::gemm with leading dimensions
// padded by `pad`, and compares: |fast − ref| ≤ tol · max|ref| elementwise (see
// kernel_agreement_test.cpp for why the tolerance scales with the largest magnitude).
template <class T>
void check(bool ta, bool tb, Shape3 s, T alpha, T beta, std::int64_t pad) {
  std::mt19937 rng(static_cast<unsigned>(s.m * 131 + s.n * 17 + s.k + ta * 7 + tb * 3));
  const std::int64_t ar = ta ? s.k : s.m, ac = ta ? s.m : s.k;  // stored shape of A
  const std::int64_t br = tb ? s.n : s.k, bc = tb ? s.k : s.n;
  const std::int64_t lda = ac + pad, ldb = bc + pad, ldc = s.n + pad;
  auto a = random_vector<T>(static_cast<std::size_t>(ar * lda), rng);
  auto b = random_vector<T>(static_cast<std::size_t>(br * ldb), rng);
  auto c0 = random_vector<T>(static_cast<std::size_t>(s.m * ldc), rng);
  auto fast = c0, ref = c0;
  if (beta == T(0))  // C must not be read: NaN would leak through
    std::fill(fast.begin(), fast.end(), std::numeric_limits<T>::quiet_NaN());
  k::cpu::gemm<T>(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, fast.data(),
                  ldc);
  k::ref::gemm<T>(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda, b.data(), ldb, beta, ref.data(),
                  ldc);
  double mag = 1e-30;
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t j = 0; j < s.n; ++j) mag = std::max(mag, std::abs(double(ref[i * ldc + j])));
  const double tol = (sizeof(T) == 4 ? 1e-5 : 1e-12) * mag;
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      ASSERT_LE(std::abs(double(fast[i * ldc + j]) - double(ref[i * ldc + j])), tol)
          << "C[" << i << "," << j << "] ta=" << ta << " tb=" << tb << " " << s.m << "x" << s.n
          << "x" << s.k << " alpha=" << alpha << " beta=" << beta << " pad=" << pad;
    }
    for (std::int64_t j = s.n; j < ldc; ++j)  // padding columns of C untouched
      ASSERT_TRUE(beta == T(0) ? std::isnan(fast[i * ldc + j]) : fast[i * ldc + j] == c0[i * ldc + j])
          << "padding C[" << i << "," << j << "] written";
  }
}

template <class T>
void check_all() {
  for (auto s : kShapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (auto [alpha, beta] : {std::pair<T, T>{1, 0}, {1, 1}, {0.5, -2}, {-1.5, 0}})
          for (std::int64_t pad : {0, 3}) check<T>(ta, tb, s, alpha, beta, pad);
}

TEST(SmallGemm, AgreesWithReferenceFloat) { check_all<float>(); }
TEST(SmallGemm, AgreesWithReferenceDouble) { check_all<double>(); }

// The small loop takes the reference model's products and leaves large ones to OpenBLAS.
TEST(SmallGemm, SizeLimit) {
  std::vector<float> a(64 * 64, 1.f), b(64 * 64, 1.f), c(64 * 64);
  EXPECT_TRUE(k::cpu::small::gemm<float>(false, true, 32, 5, 10, 1.f, a.data(), 10, b.data(), 10,
                                         0.f, c.data(), 5));
  EXPECT_TRUE(k::cpu::small::gemm<float>(true, false, 5, 10, 32, 1.f, a.data(), 5, b.data(), 10,
                                         0.f, c.data(), 10));
  EXPECT_FALSE(k::cpu::small::gemm<float>(false, false, 64, 64, 64, 1.f, a.data(), 64, b.data(),
                                          64, 0.f, c.data(), 64));
}

// Row i of C = A·Bᵀ has the same bits whether A has 1, 3, 7 or 32 rows, and column j the same
// whether B has 1 or all of its rows: each element is one in-order sum (small_gemm.h), whatever
// the tiling or orientation the kernel picks for the shape.
TEST(SmallGemm, ElementBitsDoNotDependOnShape) {
  std::mt19937 rng(5);
  const std::int64_t K = 10, N = 5, M = 32;
  auto a = random_vector<float>(M * K, rng), b = random_vector<float>(N * K, rng);
  std::vector<float> full(M * N);
  ASSERT_TRUE(k::cpu::small::gemm<float>(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f,
                                         full.data(), N));
  for (std::int64_t rows : {1, 3, 7, 31}) {
    std::vector<float> part(rows * N);
    ASSERT_TRUE(k::cpu::small::gemm<float>(false, true, rows, N, K, 1.f, a.data() + K, K,
                                           b.data(), K, 0.f, part.data(), N));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < N; ++j)
        ASSERT_EQ(part[i * N + j], full[(i + 1) * N + j]) << rows << " rows, C[" << i << "," << j << "]";
  }
  for (std::int64_t j = 0; j < N; ++j) {
    std::vector<float> col(M);
    ASSERT_TRUE(k::cpu::small::gemm<float>(false, true, M, 1, K, 1.f, a.data(), K,
                                           b.data() + j * K, K, 0.f, col.data(), 1));
    for (std::int64_t i = 0; i < M; ++i) ASSERT_EQ(col[i], full[i * N + j]) << "column " << j;
  }
}

// The SSE2 and AVX copies of the small loop give the same bits (same operations, same order), so
// results do not depend on which CPU a rank runs on.
template <class T>
void check_isa_bits() {
  if (!k::cpu::small::cpu_has_avx()) GTEST_SKIP() << "this CPU has no AVX: only the SSE2 copy runs";
  for (auto s : kShapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (bool with_bias : {false, true}) {
          std::mt19937 rng(static_cast<unsigned>(s.m + s.n * 5 + s.k * 11 + ta + 2 * tb));
          const std::int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
          auto a = random_vector<T>(static_cast<std::size_t>(s.m * s.k), rng);
          auto b = random_vector<T>(static_cast<std::size_t>(s.k * s.n), rng);
          auto bias = random_vector<T>(static_cast<std::size_t>(s.n), rng);
          auto c1 = random_vector<T>(static_cast<std::size_t>(s.m * s.n), rng), c2 = c1;
          const T alpha = with_bias ? T(1) : T(0.75), beta = with_bias ? T(0) : T(-0.5);
          const T* pb = with_bias ? bias.data() : nullptr;
          bool small1 = k::cpu::small::gemm<T>(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda,
                                               b.data(), ldb, beta, c1.data(), s.n, pb,
                                               k::cpu::small::Isa::Sse2);
          bool small2 = k::cpu::small::gemm<T>(ta, tb, s.m, s.n, s.k, alpha, a.data(), lda,
                                               b.data(), ldb, beta, c2.data(), s.n, pb,
                                               k::cpu::small::Isa::Avx);
          ASSERT_EQ(small1, small2);
          for (std::size_t i = 0; i < c1.size(); ++i)
            ASSERT_EQ(std::memcmp(&c1[i], &c2[i], sizeof(T)), 0)
                << "C[" << i << "] " << s.m << "x" << s.n << "x" << s.k << " ta=" << ta
                << " tb=" << tb << " bias=" << with_bias << ": " << c1[i] << " vs " << c2[i];
        }
}

TEST(SmallGemm, Sse2AndAvxCopiesGiveTheSameBitsFloat) { check_isa_bits<float>(); }
TEST(SmallGemm, Sse2AndAvxCopiesGiveTheSameBitsDouble) { check_isa_bits<double>(); }

// y = x·wᵀ + bias through the fused kernel (small) and the BLAS path (large), with and without
// bias, against the reference.
template <class T>
void check_linear(std::int64_t rows, std::int64_t in, std::int64_t out, bool with_bias) {
  std::mt19937 rng(static_cast<unsigned>(rows + in * 3 + out * 7));
  auto x = random_vector<T>(rows * in, rng), w = random_vector<T>(out * in, rng);
  auto bias = random_vector<T>(out, rng);
  std::vector<T> fast(rows * out, std::numeric_limits<T>::quiet_NaN()), ref(rows * out);
  const T* pb = with_bias ? bias.data() : nullptr;
  k::cpu::linear<T>(x.data(), w.data(), pb, fast.data(), rows, in, out);
  k::ref::linear<T>(x.data(), w.data(), pb, ref.data(), rows, in, out);
  double mag = 1e-30;
  for (T v : ref) mag = std::max(mag, std::abs(double(v)));
  for (std::size_t i = 0; i < ref.size(); ++i)
    ASSERT_LE(std::abs(double(fast[i]) - double(ref[i])), (sizeof(T) == 4 ? 1e-5 : 1e-12) * mag)
        << "y[" << i << "] " << rows << "x" << in << "->" << out << " bias=" << with_bias;
}

TEST(SmallGemm, LinearWithAndWithoutBias) {
  for (bool bias : {true, false})
    for (auto [r, i, o] : {std::tuple<int, int, int>{32, 10, 5}, {32, 5, 2}, {1, 1, 1}, {7, 33, 5},
                           {0, 3, 2}, {4, 0, 3}, {128, 256, 10}, {64, 64, 64}}) {
      check_linear<float>(r, i, o, bias);
      check_linear<double>(r, i, o, bias);
    }
}

}  // namespace
}  // namespace lockstep::testing
