// The losses with torch's `reduction` argument, and nll_loss (torch.nn.functional.nll_loss).
// ops.h's cross_entropy(logits, target, ignore_index) and mse_loss(input, target) are the
// reduction 'mean' of these, on the fused kernels (and on CUDA); 'sum' and 'none' and nll_loss
// run on the CPU (DeviceError on a GPU).
#pragma once

#include <cstdint>
#include <string>

#include "lockstep/ops/ops.h"

namespace lockstep {

/// torch's reduction of a loss over its elements: 'none' (one loss per element or row), 'mean'
/// (over the targets that count), 'sum'.
enum class Reduction { None, Mean, Sum };
/// "none", "mean" or "sum" (torch's strings); ValueError naming the string otherwise ("x is not
/// a valid value for reduction", as torch).
Reduction reduction_from(const std::string& s);

/// torch.nn.functional.nll_loss: input [N, C] log-probabilities (float) or [C] for one sample,
/// target [N] (or 0-d) int64 class indices. Each row's loss is −input[i, target[i]], 0 where the
/// target equals ignore_index. 'mean' divides the sum by the number of targets that are not
/// ignored (NaN when all are, as torch), 'sum' adds, 'none' gives the [N] losses. The gradient is
/// −g (scaled as the reduction) at each row's target, 0 elsewhere. IndexError naming the row for a
/// target outside [0, C) ("Target 7 is out of bounds", torch's); ShapeError for other ranks or a
/// target whose length is not N; DTypeError for an int64 input or a float target.
Tensor nll_loss(const Tensor& input, const Tensor& target, std::int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);
/// cross_entropy with a reduction: 'mean' is ops.h's fused one; 'sum' and 'none' are
/// nll_loss(log_softmax(logits, 1)), as torch defines them. Errors as cross_entropy's.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                     Reduction reduction);
/// mse_loss with a reduction: 'none' gives (input − target)² elementwise, 'sum' its sum, 'mean'
/// ops.h's mse_loss. ShapeError when the shapes differ.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction);

}  // namespace lockstep
