// Batch normalization (torch.nn.functional.batch_norm), float32 and float64, differentiable in
// the input, the weight and the bias.
#pragma once

#include "lockstep/core/tensor.h"

namespace lockstep {

/// torch.nn.functional.batch_norm: x [N, C], [N, C, L] or [N, C, H, W] (float32/float64); per
/// channel c,
///   y = (x − μ_c) / sqrt(σ²_c + eps) · weight[c] + bias[c]
/// computed as y = x·α_c + β_c with α = invstd·weight, β = bias − μ·α (PyTorch's CPU form,
/// aten/src/ATen/native/cpu/batch_norm_kernel.cpp) (weight, bias [C] or undefined: 1 and 0);
/// invstd = 0 when σ² and eps are both 0 (PyTorch's InvStd). Training: μ, σ² are the batch
/// statistics over N and the spatial dims (σ² biased, divided by the count m = N·L or N·H·W),
/// and where running_mean / running_var ([C], same dtype and device, or undefined: PyTorch's
/// track_running_stats=False; each is updated if given) are given they are updated in place,
/// outside autograd: running = (1 − momentum)·running + momentum·stat, with the unbiased
/// variance σ²·m/(m − 1) for running_var (PyTorch's). Eval (training false): μ, σ² are
/// running_mean / running_var, which must be given and are left untouched; they are copied at
/// the call, so changing them afterwards does not change the gradient. The gradient in training
/// flows through the batch statistics (PyTorch's batch_norm_backward):
///   dx = (dy − mean(dy) − x̂·mean(dy·x̂)) · invstd·weight,  dweight = Σ dy·x̂,  dbias = Σ dy;
/// in eval dx = dy · invstd·weight. Differentiable once in x, weight and bias. An input with no
/// elements (N = 0) gives an empty output, zero weight/bias gradients and no running update
/// (PyTorch's numel() == 0 path). A momentum of None (cumulative average) is the module's
/// business: it passes 1 / num_batches_tracked.
/// Numerics: the statistics are accumulated in double for float32 too, in two passes (Σx, then
/// Σ(x − μ)² with μ kept in double), and the running updates and α, β are computed in double and
/// rounded once. PyTorch's contiguous CPU kernel (batch_norm_cpu_collect_stats_contiguous_impl)
/// also takes two passes, summing in acc_type (double for float in the 1.13 kernel) but rounding
/// μ to float before the variance pass; its non-contiguous and CUDA paths use Welford in the
/// accumulate type (float on CUDA). So float32 results agree with PyTorch's to rounding, not bit
/// for bit. On cuda:k each channel's sums are one block reduction in double (same formulas,
/// another order: agreement with the CPU to rounding).
/// Errors (all checked before any running statistic is touched): ShapeError for x not 2-4-d or
/// parameters not [C]; ValueError in training when a channel has one value (m = 1: PyTorch's
/// "Expected more than 1 value per channel when training"), or in eval without running
/// statistics; DTypeError / DeviceError for mixed dtypes or devices (or int64 x).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);

}  // namespace lockstep
