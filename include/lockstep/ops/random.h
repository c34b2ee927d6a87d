// In-place samplers (torch.Tensor.uniform_, normal_, random_, bernoulli_), drawing from `gen` or
// the default generator (locked while drawing). On an MT19937 generator they are PyTorch's CPU
// kernels bit for bit (src/ops/torch_random.cpp); on Philox they are Lockstep's own
// transformations (the ones randn/rand/randint use). Any shape and device (a cuda:k tensor is
// drawn on the host and copied over); values are written without recording autograd.
#pragma once

#include <cstdint>

#include "lockstep/core/generator.h"
#include "lockstep/core/tensor.h"

namespace lockstep {

/// U(from, to) in t's float dtype (torch uniform_kernel). DTypeError for int64.
Tensor& uniform_(Tensor& t, double from, double to, Generator* gen = nullptr);
/// N(mean, std²) in t's float dtype (torch normal_kernel). DTypeError for int64, ValueError for
/// std < 0.
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
/// Integers in [from, to) (torch random_(from, to)), any dtype. ValueError when to <= from.
Tensor& random_(Tensor& t, std::int64_t from, std::int64_t to, Generator* gen = nullptr);
/// random_() without bounds: [0, 2^63) for int64, [0, 2^mantissa] for floats (torch's rule).
Tensor& random_(Tensor& t, Generator* gen = nullptr);
/// 1 with probability p, else 0, in t's dtype (torch bernoulli_(p) without MKL: see
/// docs/design.md, "Random streams"). ValueError when p is outside [0, 1].
Tensor& bernoulli_(Tensor& t, double p, Generator* gen = nullptr);

/// torch.multinomial: `num_samples` category indices per row of `input` ([C] -> [num_samples],
/// [R, C] -> [R, num_samples], int64, on input's device), drawn with probability proportional to
/// the row's non-negative weights (they need not sum to 1), with or without replacement (without:
/// each index at most once per row; when fewer than num_samples weights are positive the rest are
/// the unchosen indices in increasing order). One uniform draw per sample (the torch_random
/// uniform double on MT19937, next_double on Philox) picks by inverse CDF: the distribution is
/// torch's, the stream is not (torch draws exponentials, through MKL on x86 builds).
/// DTypeError for an int64 input; ShapeError for a rank other than 1 or 2; ValueError for
/// num_samples <= 0, num_samples > C without replacement, a negative, infinite or NaN weight, or
/// a row summing to 0 (torch's messages).
Tensor multinomial(const Tensor& input, std::int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);

}  // namespace lockstep
