// Gradient utilities (torch.nn.utils).
#pragma once

#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::nn::utils {

/// torch.nn.utils.clip_grad_norm_ (PyTorch 1.13, torch/nn/utils/clip_grad.py) with its default
/// error_if_nonfinite=False. The total norm is the norm_type-norm of the per-parameter gradient
/// norms (= the norm of all gradients concatenated); clip_coef = max_norm / (total + 1e-6),
/// clamped to at most 1, and every gradient is multiplied by it in place (a coefficient of
/// exactly 1 leaves the gradients untouched, as multiplying by 1 would). Parameters whose
/// gradient is none are skipped; with no gradient at all nothing changes and 0 is returned.
///
/// parameters: tensors of any shape (float32/float64 gradients). norm_type: 2.0 (default), any
/// finite p > 0 ((Σ|g|^p)^(1/p)), or +infinity (max |g|). Returns the total norm before
/// clipping. Arithmetic as PyTorch's: each norm and the coefficient are rounded to float32 when
/// every gradient is float32 (sums are accumulated in float64, so the result is within float32
/// rounding of PyTorch's). A NaN or Inf total norm is not an error (as PyTorch's default): NaN
/// makes every gradient NaN, +Inf gives coefficient 0.
///
/// ValueError for max_norm negative or not finite, norm_type not > 0 (or NaN), or an undefined
/// tensor in `parameters`; DTypeError for an integer gradient.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0);

// clip_grad_norm_ in parts, for gradients split across processes
// (parallel::ZeroRedundancyOptimizer::clip_grad_norm_, whose ranks each hold pieces of every
// gradient): a gradient's power sum adds over its pieces (maxes for p = inf), the norm follows
// from the whole sum, and the clipping from every gradient's norm.

/// Σ|g|^p over the elements of `g` in float64 (p = inf: max |g|, NaN if any is NaN; no
/// elements: 0). DTypeError for an integer tensor.
double grad_power_sum(const Tensor& g, double norm_type);
/// The norm_type-norm from a power sum: s^(1/p) (p = 1 and inf: s; p = 2: √s).
double norm_from_power_sum(double sum, double norm_type);
/// clip_grad_norm_'s total norm and clipping from the per-parameter gradient norms `norms`
/// (float64, unrounded; one per parameter with a gradient, none: returns 0 and changes
/// nothing), multiplying each tensor of `grads` (the gradients, or this process's pieces of
/// them) by the coefficient; `all_float`: every gradient is float32 (the norms and the
/// coefficient are rounded to float32, as clip_grad_norm_ does). Returns the total norm.
/// ValueError as clip_grad_norm_ for max_norm and norm_type.
double clip_grads_with_norms_(const std::vector<Tensor>& grads, const std::vector<double>& norms,
                              double max_norm, double norm_type, bool all_float);

}  // namespace lockstep::nn::utils
