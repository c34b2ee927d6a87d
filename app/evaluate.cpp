// Classifier evaluation (see evaluate.h).
#include "evaluate.h"

#include <algorithm>
#include <cmath>

#include "lockstep/lockstep.h"

namespace lockstep::app {

EvalResult evaluate(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x,
                    const Tensor& y) {
  constexpr std::int64_t kChunk = 8192;
  no_grad guard;
  nn::CrossEntropyLoss criterion;
  const std::int64_t n = x.size(0);
  double loss_sum = 0.0, single_loss = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < n; start += kChunk) {
    const std::int64_t len = std::min(kChunk, n - start);
    Tensor logits = forward(x.narrow(0, start, len));
    Tensor labels = y.narrow(0, start, len).to(logits.device());
    const double loss = criterion(logits, labels).item();
    if (len == n) single_loss = loss;
    loss_sum += loss * static_cast<double>(len);
    correct += static_cast<std::int64_t>(sum(eq(argmax(logits, 1), labels)).item());
  }
  EvalResult r;
  r.loss = n <= kChunk ? single_loss : loss_sum / static_cast<double>(n);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  r.samples = n;
  return r;
}

EvalResult evaluate_across_ranks(const DistContext& dist,
                                 const std::function<Tensor(const Tensor&)>& forward,
                                 const Tensor& x, const Tensor& y) {
  if (dist.world == 1) return evaluate(forward, x, y);
  const auto [start, count] =
      parallel::split_batch(x.size(0), dist.world)[static_cast<std::size_t>(dist.rank)];
  std::vector<double> sums{0.0, 0.0, 0.0};  // loss sum, correct rows, rows
  if (count > 0) {
    const EvalResult local =
        evaluate(forward, x.narrow(0, start, count), y.narrow(0, start, count));
    sums = {local.loss * static_cast<double>(count),
            std::round(local.accuracy * static_cast<double>(count)), static_cast<double>(count)};
  }
  sums = sum_across_ranks(dist, sums);
  EvalResult r;
  r.samples = static_cast<std::int64_t>(sums[2]);
  r.loss = sums[0] / sums[2];
  r.accuracy = sums[1] / sums[2];
  return r;
}

}  // namespace lockstep::app
