// Layer normalization (torch.nn.functional.layer_norm), float32 and float64, differentiable in
// the input, the weight and the bias.
#pragma once

#include "lockstep/core/tensor.h"

namespace lockstep {

/// torch.nn.functional.layer_norm(x, normalized_shape, weight, bias, eps): x [*, D1, ..., Dk]
/// (float32/float64) whose trailing k sizes are normalized_shape (k >= 1), normalized over those
/// k dimensions, one "row" of n = D1·...·Dk elements per position of the leading ones:
///   y = (x − μ) / sqrt(σ² + eps) · weight + bias
/// with μ and σ² the row's mean and biased variance (PyTorch's), computed as
/// y = ((x − μ)·rstd)·weight + bias in x's dtype, rstd = 1/sqrt(σ² + eps) (PyTorch's CUDA form,
/// aten/src/ATen/native/cuda/layer_norm_kernel.cu; its CPU kernel's x·rstd − μ·rstd cancels
/// when |μ| ≫ σ, src/ops/layer_norm_bodies.h). weight and bias: normalized_shape, same
/// dtype and device, each optional (undefined: 1 and 0; nanoGPT's LayerNorm passes bias only
/// when it has one). The output has x's shape, dtype and device. Backward (PyTorch's
/// layer_norm_backward): with g = dy·weight,
///   dx = (g − mean(g) − x̂·mean(g·x̂))·rstd,  dweight = Σ_rows dy·x̂,  dbias = Σ_rows dy,
/// x̂ = (x − μ)·rstd; differentiable once in x, weight and bias. An input without rows (a
/// leading size 0) gives an empty output and zero weight/bias gradients.
/// Numerics: each row's μ and σ² are accumulated in double in two passes (Σx, then Σ(x − μ)²
/// with μ in double) in a fixed order, rstd and the row coefficients in double, rounded once;
/// dweight and dbias sum the rows in row order in double. Whoever computes a row or a column,
/// it sums in the same order, so the bits do not depend on the thread count. PyTorch's CPU
/// kernel uses a Welford/cascade sum in float for float32, so float32 results agree with its to
/// rounding, not bit for bit. On cuda:k a row's sums are one block reduction in double (another
/// order: agreement with the CPU to rounding); dweight and dbias are the CPU's expression and
/// order. Under autocast (lockstep/ops/autocast.h) layer_norm runs in float32, as PyTorch's
/// (it is on autocast's float32 list).
/// Errors: ShapeError for an empty normalized_shape ("at least 1-dimensional"), x whose
/// trailing sizes are not normalized_shape (PyTorch's "Given normalized_shape=..., expected
/// input with shape [*, ...], but got input of size ...") or weight / bias not normalized_shape;
/// DTypeError for an int64 x or mixed dtypes; DeviceError for mixed devices. All name the shapes.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

}  // namespace lockstep
