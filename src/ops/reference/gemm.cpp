// Reference GEMM: the textbook triple loop, accumulating in double. The oracle for cpu::gemm.
#include "ops/kernels.h"

namespace lockstep::kernels::ref {

template <class T>
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, T alpha, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        double av = ta ? a[p * lda + i] : a[i * lda + p];
        double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      double prev = beta == T(0) ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      c[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * acc + prev);
    }
  }
}

template <class T>
void linear(const T* x, const T* w, const T* bias, T* y, std::int64_t rows, std::int64_t in,
            std::int64_t out) {
  linear_by_gemm<T>(&gemm<T>, x, w, bias, y, rows, in, out);
}

template void linear<float>(const float*, const float*, const float*, float*, std::int64_t,
                            std::int64_t, std::int64_t);
template void linear<double>(const double*, const double*, const double*, double*, std::int64_t,
                             std::int64_t, std::int64_t);
template void gemm<float>(bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                          const float*, std::int64_t, const float*, std::int64_t, float, float*,
                          std::int64_t);
template void gemm<double>(bool, bool, std::int64_t, std::int64_t, std::int64_t, double,
                           const double*, std::int64_t, const double*, std::int64_t, double,
                           double*, std::int64_t);

}  // namespace lockstep::kernels::ref
