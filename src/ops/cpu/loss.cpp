// Fast fused softmax + cross-entropy: one pass for the row max, one for exp and the sum, one to
// normalise; the probabilities are kept for the backward pass (dlogits = (p - onehot) / count).
#include <cmath>

#include "ops/kernels.h"

namespace lockstep::kernels::cpu {

template <class T>
void cross_entropy(const T* logits, const std::int64_t* target, std::int64_t n, std::int64_t c,
                   std::int64_t ignore_index, double* loss_sum, std::int64_t* count, T* prob) {
  double total = 0;
  std::int64_t cnt = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * c;
    T* p = prob + i * c;
    T mx = row[0];
    std::int64_t arg = 0;
    for (std::int64_t j = 1; j < c; ++j)
      if (row[j] > mx) mx = row[j], arg = j;
    T s = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      p[j] = j == arg ? T(1) : std::exp(row[j] - mx);  // exp(0) is exactly 1: one call less per row
      s += p[j];
    }
    T inv = T(1) / s;
    for (std::int64_t j = 0; j < c; ++j) p[j] *= inv;
    if (target[i] == ignore_index) continue;
    // -log softmax[t] = log(s) - (x_t - max)
    total += static_cast<double>(std::log(s)) - static_cast<double>(row[target[i]] - mx);
    ++cnt;
  }
  *loss_sum = total;
  *count = cnt;
}

template void cross_entropy<float>(const float*, const std::int64_t*, std::int64_t, std::int64_t,
                                   std::int64_t, double*, std::int64_t*, float*);
template void cross_entropy<double>(const double*, const std::int64_t*, std::int64_t,
                                    std::int64_t, std::int64_t, double*, std::int64_t*, double*);

}  // namespace lockstep::kernels::cpu
