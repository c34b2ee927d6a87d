// Fast GEMM: OpenBLAS through the CBLAS interface (row-major). (Direct loops for tiny products
// such as the reference model's 32×5×10 were measured 1.3–3× slower than OpenBLAS, so every
// size goes to OpenBLAS.)
#include <cblas.h>

#include <algorithm>

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

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                 float* c, std::int64_t ldc) {
  if (degenerate(m, n, k, beta, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, ld(lda), b,
              ld(ldb), beta, c, ld(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                  const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                  double beta, double* c, std::int64_t ldc) {
  if (degenerate(m, n, k, beta, c, ldc)) return;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, ld(lda), b,
              ld(ldb), beta, c, ld(ldc));
}

}  // namespace lockstep::kernels::cpu
