// Reference cross-entropy: log-softmax per row, computed stably (row max subtracted), in double.
#include <cmath>
#include <vector>

#include "ops/kernels.h"

namespace lockstep::kernels::ref {

template <class T>
void cross_entropy(const T* logits, const std::int64_t* target, std::int64_t n, std::int64_t c,
                   std::int64_t ignore_index, double* loss_sum, std::int64_t* count, T* prob) {
  double total = 0;
  std::int64_t cnt = 0;
  std::vector<double> logp(static_cast<std::size_t>(c));
  for (std::int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * c;
    double mx = -INFINITY;
    for (std::int64_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    double s = 0;
    for (std::int64_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
    double lse = mx + std::log(s);
    for (std::int64_t j = 0; j < c; ++j) {
      logp[j] = static_cast<double>(row[j]) - lse;
      prob[i * c + j] = static_cast<T>(std::exp(logp[j]));
    }
    if (target[i] == ignore_index) continue;
    total -= logp[target[i]];
    ++cnt;
  }
  *loss_sum = total;
  *count = cnt;
}

template void cross_entropy<float>(const float*, const std::int64_t*, std::int64_t, std::int64_t,
                                   std::int64_t, double*, std::int64_t*, float*);
template void cross_entropy<double>(const double*, const std::int64_t*, std::int64_t,
                                    std::int64_t, std::int64_t, double*, std::int64_t*, double*);

}  // namespace lockstep::kernels::ref
