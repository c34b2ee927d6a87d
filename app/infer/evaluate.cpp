// Classifier evaluation (see evaluate.h).
#include "infer/evaluate.h"

#include <algorithm>
#include <cmath>

#include "lockstep/lockstep.h"

namespace lockstep::app {

EvalResult evaluate(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x,
                    const Tensor& y, std::int64_t max_rows) {
  const std::int64_t kChunk = std::max<std::int64_t>(1, max_rows);
  no_grad guard;
  nn::CrossEntropyLoss criterion;
  const std::int64_t n = x.size(0);
  double loss_sum = 0.0, single_loss = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < n; start += kChunk) {
    const std::int64_t len = std::min(kChunk, n - start);
    // Loss and accuracy on the host: a model on a GPU returns its logits there (argmax and eq
    // have no CUDA path, and this is a small copy next to the forward).
    Tensor logits = forward(x.narrow(0, start, len)).to(cpu());
    Tensor labels = y.narrow(0, start, len).to(cpu());
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
                                 const Tensor& x, const Tensor& y, std::int64_t max_rows) {
  if (dist.world == 1) return evaluate(forward, x, y, max_rows);
  // sums over this rank's rows: loss · rows, correct rows
  const auto totals = parallel::evaluate_exact(
      dist.group.get(), x, y,
      [&forward, max_rows](const Tensor& xs, const Tensor& ys) {
        const EvalResult local = evaluate(forward, xs, ys, max_rows);
        const auto rows = static_cast<double>(xs.size(0));
        return std::vector<double>{local.loss * rows, std::round(local.accuracy * rows)};
      },
      2);
  EvalResult r;
  r.samples = static_cast<std::int64_t>(totals[2]);
  r.loss = totals[0] / totals[2];
  r.accuracy = totals[1] / totals[2];
  return r;
}

}  // namespace lockstep::app
