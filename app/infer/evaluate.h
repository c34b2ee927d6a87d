// Loss and accuracy of a classifier over a set of rows (validation after each epoch, and
// `lockstep eval`).
#pragma once

#include <functional>

#include "ranks/distributed.h"
#include "lockstep/core/tensor.h"

namespace lockstep::app {

struct EvalResult {
  /// Mean cross-entropy over the rows (nn::CrossEntropyLoss, reduction mean).
  double loss = 0.0;
  /// Fraction of rows whose argmax over the logits (first index on ties) equals the label.
  double accuracy = 0.0;
  /// Rows evaluated (over all ranks for evaluate_across_ranks).
  std::int64_t samples = 0;
};

/// Runs `forward` (logits [n, C] for features [n, F]) under no_grad over x [N, F] float32 with
/// labels y [N] int64, in chunks of at most `max_rows` rows (eval_chunk_rows: bounded memory);
/// the loss is the chunks' mean losses weighted by their sizes (for N <= max_rows exactly
/// CrossEntropyLoss over all rows at once, as the reference program computes its validation
/// loss). Labels are moved to the logits' device.
/// N must be >= 1. The caller puts the model in eval mode.
EvalResult evaluate(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x,
                    const Tensor& y, std::int64_t max_rows = 8192);

/// Exact evaluation across the ranks of `dist`: rank r evaluates its tensor_split part of the
/// rows (parallel::split_batch), so every row is evaluated exactly once, and the loss sums,
/// correct counts and row counts are summed across ranks (identical on every rank). A rank may
/// get no rows. Alone (one rank) it is evaluate(). Needs N >= 1.
EvalResult evaluate_across_ranks(const DistContext& dist,
                                 const std::function<Tensor(const Tensor&)>& forward,
                                 const Tensor& x, const Tensor& y, std::int64_t max_rows = 8192);

}  // namespace lockstep::app
