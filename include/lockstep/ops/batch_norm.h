// Batch normalization (torch.nn.functional.batch_norm), float32 and float64, differentiable in
// the input, the weight and the bias.
#pragma once

#include <cstdint>

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

// ---- SyncBatchNorm's pieces (torch/nn/modules/_functions.py, class SyncBatchNorm) -------------
// Not differentiable themselves: nn::SyncBatchNorm runs them around its collectives and records
// its own backward. `mean_invstd` is [2, C] float64 on x's device: row 0 the mean, row 1
// invstd = 1/sqrt(σ² + eps) (σ² biased). x as batch_norm's (2-4-d, float32/float64); each
// throws ShapeError / DTypeError / DeviceError as batch_norm does for mismatched arguments.

/// torch.batch_norm_stats, but with the variance itself rather than invstd (so it travels
/// between ranks unrounded): [2, C] float64 on x's device, row 0 the per-channel mean of x, row
/// 1 its biased variance (two passes in double, batch_norm's sums). Zeros for an x without
/// elements. The count of the piece is x.numel() / C.
Tensor batch_norm_stats(const Tensor& x);

/// The merged statistics of a group's pieces: mean_invstd [2, C] float64 on the CPU and the total
/// count Σ n_w (values per channel).
struct BatchNormGathered {
  Tensor mean_invstd;
  std::int64_t count = 0;
};

/// torch.batch_norm_gather_stats_with_counts: `rows` [W, 2C + 1] float64 (any device), row w =
/// (mean_w [C], var_w [C] biased, n_w) of member w. Rows with n_w = 0 are dropped; the others
/// are merged in row order by Chan et al.'s pairwise update ("Updating Formulae and a Pairwise
/// Algorithm for Computing Sample Variances", 1979), as PyTorch's
/// batch_norm_reduce_statistics_kernel does:
///   M2 += n_w·var_w + (mean − mean_w)²·n·n_w/(n + n_w);  mean = (n·mean + n_w·mean_w)/(n + n_w)
/// in double, so the result depends on the rows and their order only. invstd uses the biased
/// global variance M2/n; running_mean / running_var ([C], float32/float64, any device, or
/// undefined: not updated) move with `momentum` toward the mean and the unbiased M2/(n − 1), as
/// batch_norm's do. When every row is empty (n = 0) nothing is updated and mean_invstd is zeros
/// (PyTorch would decay the running statistics toward NaN there, pytorch/pytorch#36530).
/// ValueError when n = 1 (PyTorch's "Expected more than 1 value per channel when training"),
/// before anything is updated; ShapeError for rows not [W, 2C + 1] or running stats not [C];
/// ValueError for a count that is negative or not an integer.
BatchNormGathered batch_norm_gather_stats(const Tensor& rows, const Tensor& running_mean,
                                          const Tensor& running_var, double momentum,
                                          double eps);

/// torch.batch_norm_elemt: y = (x − mean)·invstd·weight + bias per channel (batch_norm's form
/// y = x·α + β), from given statistics (mean_invstd on x's device). weight, bias [C] or
/// undefined (1 and 0).
Tensor batch_norm_elemt(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean_invstd);

/// torch.batch_norm_backward_reduce: [2, C] float64 on x's device, row 0 Σ dy, row 1
/// Σ dy·(x − mean) over this piece (double sums; zeros for an empty piece). dy shaped as x.
Tensor batch_norm_backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean_invstd);

/// torch.batch_norm_backward_elemt: dx = (dy − Σdy/n − (x − mean)·invstd²·Σdy(x − mean)/n)
/// · invstd·weight with the group's sums ([2, C] float64 on x's device, as
/// batch_norm_backward_reduce returns, all-reduced) and its total count n ≥ 1 (ValueError
/// otherwise).
Tensor batch_norm_backward_elemt(const Tensor& dy, const Tensor& x, const Tensor& mean_invstd,
                                 const Tensor& weight, const Tensor& sums, std::int64_t count);

}  // namespace lockstep
