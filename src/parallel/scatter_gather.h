// DataParallel's scatter and gather rules for several inputs and outputs (internal), after
// PyTorch's torch/nn/parallel/scatter_gather.py: every tensor argument is split along dim 0 with
// the same sizes (tensor_split), plain values go to every replica unchanged; every output tensor
// is gathered along dim 0, and a 0-d output becomes a vector with one value per piece.
#pragma once

#include <vector>

#include "lockstep/nn/args.h"

namespace lockstep::parallel::detail {

// The rows every tensor argument has along dim 0. ShapeError (prefixed with `who`) when there is
// no tensor argument, one is undefined or 0-d, or two disagree on dim 0, naming the argument.
std::int64_t batch_rows(const nn::Args& args, const char* who);

// Checks one piece's outputs: every output defined; a batched one (dim >= 1) with `rows` rows
// (rows < 0: not checked); the same number of outputs as `first` (another piece's), each 0-d
// exactly where first's is. ShapeError naming the output otherwise.
void check_piece_outputs(const std::vector<Tensor>& outs, const std::vector<Tensor>& first,
                         std::int64_t rows);

// Backward from several roots at once, roots[i] seeded with grads[i] (one root: its backward;
// several: the backward of Σ sum(roots[i] · grads[i]), whose gradient at roots[i] is grads[i]
// exactly).
void backward_roots(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                    bool retain_graph);

}  // namespace lockstep::parallel::detail
