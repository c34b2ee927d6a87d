// Random windows of a token stream for language-model training: nanoGPT's get_batch
// (karpathy/nanoGPT train.py), `ix = torch.randint(len(data) - block_size, (batch_size,))`,
// x = data[i : i + block_size], y = data[i + 1 : i + 1 + block_size], drawn from a seeded
// generator so a run is reproducible (the offsets are Lockstep's draws, not PyTorch's bits).
#pragma once

#include <cstdint>
#include <utility>

#include "lockstep/core/generator.h"
#include "lockstep/core/tensor.h"

namespace lockstep::data {

/// `batch` windows of `block` + 1 consecutive tokens of `tokens` ([N] int64, CPU): offsets
/// i_0 ... i_{batch-1} drawn in order as randint(0, N - block, {batch}, gen) (uniform in
/// [0, N - block - 1]), inputs x [batch, block] = tokens[i : i + block] and targets
/// y [batch, block] = tokens[i + 1 : i + block + 1], both int64. Advances `gen` by the draws of
/// that randint. ValueError naming the sizes for block < 1, batch < 1, or N < block + 1 (no
/// whole window); DTypeError for tokens that are not 1-d int64.
std::pair<Tensor, Tensor> random_windows(const Tensor& tokens, std::int64_t block,
                                         std::int64_t batch, Generator& gen);

}  // namespace lockstep::data
