// Classifier evaluation (see evaluate.h).
#include "evaluate.h"

#include <algorithm>

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
  return r;
}

}  // namespace lockstep::app
