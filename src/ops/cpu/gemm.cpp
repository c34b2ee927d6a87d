// Fast GEMM: OpenBLAS through the CBLAS interface (row-major), single-threaded per call, large
// products split over the calling thread's intra-op team (lockstep/core/parallel.h). (Direct loops for tiny products
// such as the reference model's 32×5×10 were measured 1.3–3× slower than OpenBLAS, so every
// size goes to OpenBLAS.)
#include <cblas.h>

#include <algorithm>
#include <mutex>

#include "lockstep/core/parallel.h"
#include "ops/kernels.h"

namespace lockstep::kernels::cpu {

namespace {

// BLAS rejects leading dimensions below 1 even when a dimension is zero.
int ld(std::int64_t v) { return static_cast<int>(std::max<std::int64_t>(v, 1)); }

template <class T>
bool degenerate(std::int64_t m, std::int64_t n, std::int64_t k, T beta, T* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k == 0) {  // C = beta * C
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return true;
  }
  return false;
}

// OpenBLAS runs single-threaded inside every call; parallelism comes from splitting (below).
void init_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Products of at least this many multiply-adds are split over the calling thread's team.
constexpr std::int64_t kSplitMacs = std::int64_t(1) << 18;

// Splits C into `parts` row blocks (or column blocks when N > M) and runs `g` on each block with
// the operand pointers offset to match. Each element of C is computed by exactly one BLAS call
// over the full K, so the split does not change which products are summed into it.
template <class T, class G>
void split_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
                std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, G g) {
  int threads = get_num_threads();
  bool by_rows = m >= n;
  std::int64_t dim = by_rows ? m : n;
  int parts = static_cast<int>(std::min<std::int64_t>(threads, dim / 16));
  if (parts <= 1 || m * n * k < kSplitMacs) return g(m, n, a, b, c);
  parallel_run(parts, [&](int i) {
    std::int64_t lo = dim * i / parts, hi = dim * (i + 1) / parts;
    if (by_rows)
      g(hi - lo, n, ta ? a + lo : a + lo * lda, b, c + lo * ldc);
    else
      g(m, hi - lo, a, tb ? b + lo * ldb : b + lo, c + lo);
  });
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                 float* c, std::int64_t ldc) {
  if (degenerate(m, n, k, beta, c, ldc)) return;
  init_blas();
  split_gemm<float>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                    [&](std::int64_t mm, std::int64_t nn, const float* aa, const float* bb,
                        float* cc) {
                      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                                  tb ? CblasTrans : CblasNoTrans, static_cast<int>(mm),
                                  static_cast<int>(nn), static_cast<int>(k), alpha, aa, ld(lda),
                                  bb, ld(ldb), beta, cc, ld(ldc));
                    });
}

template <>
void gemm<double>(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                  const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                  double beta, double* c, std::int64_t ldc) {
  if (degenerate(m, n, k, beta, c, ldc)) return;
  init_blas();
  split_gemm<double>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc,
                     [&](std::int64_t mm, std::int64_t nn, const double* aa, const double* bb,
                         double* cc) {
                       cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                                   tb ? CblasTrans : CblasNoTrans, static_cast<int>(mm),
                                   static_cast<int>(nn), static_cast<int>(k), alpha, aa, ld(lda),
                                   bb, ld(ldb), beta, cc, ld(ldc));
                     });
}

}  // namespace lockstep::kernels::cpu
