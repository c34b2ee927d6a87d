// Fast GEMM: tiny products (up to kMaxPaddedMacs, e.g. the reference model's 32×10×5 layers) in
// small_gemm.h's register-tiled loop, which skips OpenBLAS's per-call packing and locking;
// everything else through OpenBLAS's CBLAS interface (row-major), single-threaded per call, with
// large products split over the calling thread's intra-op team (lockstep/core/parallel.h).
#include <cblas.h>

#include <algorithm>
#include <mutex>

#include "lockstep/core/parallel.h"
#include "ops/cpu/small_gemm.h"
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
  if (small::gemm<float>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
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
  if (small::gemm<double>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
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

// y = x wᵀ + bias: small products in one pass with the bias added as each result is stored;
// larger ones through linear_by_gemm (y preset to the bias, beta = 1), as addmm does.
template <class T>
void linear(const T* x, const T* w, const T* bias, T* y, std::int64_t rows, std::int64_t in,
            std::int64_t out) {
  if (rows > 0 && out > 0 && in > 0 &&
      small::gemm<T>(false, true, rows, out, in, T(1), x, in, w, in, T(0), y, out, bias))
    return;
  linear_by_gemm<T>(&gemm<T>, x, w, bias, y, rows, in, out);
}

template void linear<float>(const float*, const float*, const float*, float*, std::int64_t,
                            std::int64_t, std::int64_t);
template void linear<double>(const double*, const double*, const double*, double*, std::int64_t,
                             std::int64_t, std::int64_t);

}  // namespace lockstep::kernels::cpu
