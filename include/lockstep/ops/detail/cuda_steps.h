// Internal: the CUDA paths the layers above the op layer call themselves, in the conventions of
// src/ops/cuda_ops.h (which includes this): the optimizers' updates (src/optim/, one launch per
// parameter or one for a flat buffer) and deterministic mode's gradient tree (src/parallel/).
// Implemented in src/ops/cuda/tensor_ops.cpp; without CUDA, src/ops/cuda_stub.cpp stands in
// (never reached: no cuda:k tensor exists there). No CUDA header is included here.
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::cuda_ops {

/// Deterministic mode's fixed pairwise tree over the rows of slots [rows, width] (contiguous,
/// float32 or float64, on a CUDA device), per column: row 0 ← the total, rows 1.. partial sums;
/// bit for bit parallel::detail::tree_sum_columns (kernels::cuda::tree_sum_rows). ShapeError
/// unless slots is 2-d.
void tree_sum_rows(const Tensor& slots);

/// One optim::SGD update of one parameter (kernels::cuda::sgd_step); `momentum_buffer` undefined
/// when momentum == 0; `first` when the buffer was just created (its contents are ignored).
/// Returns the kernels launched (1, or 0 for an empty parameter).
int sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, bool first,
             double lr, double momentum, double dampening, double weight_decay, bool nesterov);
/// One optim::Adam / AdamW update of one parameter (kernels::cuda::adam_step); `step` is the
/// 1-based step count after this update. Returns the kernels launched (1, or 0 when empty).
int adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Tensor& exp_avg_sq, double lr, double beta1, double beta2, double eps,
              double weight_decay, double step, bool decoupled);

/// One parameter of a flat optimizer step (optim::detail::FlatPlan): its elements are
/// [param_offset, +numel) from the parameter base, [grad_offset, +numel) from the gradient base
/// and [state_offset, +numel) of each flat state buffer.
struct FlatUpdateSegment {
  std::int64_t param_offset = 0;
  std::int64_t grad_offset = 0;
  std::int64_t state_offset = 0;
  std::int64_t numel = 0;
  bool first = false;             ///< SGD: no momentum buffer yet
  bool fresh_exp_avg = false;     ///< Adam: exp_avg not created yet (read as zeros)
  bool fresh_exp_avg_sq = false;  ///< Adam: exp_avg_sq not created yet (read as zeros)
  double step = 1;                ///< Adam: this parameter's 1-based step count after the update
};
/// How a flat step runs (CUDA graphs, docs/cuda.md "CUDA graphs"):
///   Eager    the table is uploaded through the pinned staging buffer and the kernel launched;
///   Capture  (while the device's stream is captured) nothing is uploaded: the launch reads the
///            table and the step's scalars from `graph`'s buffer, allocated here at a fixed
///            address; its contents are written before each replay by a Stage call;
///   Stage    (before a replay) the table and scalars of this step are uploaded into `graph`'s
///            buffer; nothing is launched. ValueError when the table's layout differs from the
///            captured one (the graph would update other elements).
enum class FlatMode { Eager, Capture, Stage };
/// A captured flat step's device table: [scalars (256 bytes)][segments].
struct FlatGraphTable {
  Tensor buffer;                     ///< int64 on the device, fixed while the graph lives
  std::vector<std::int64_t> layout;  ///< per segment: offsets, numel, first_block, flags
  std::int64_t count = 0, blocks = 0;
};
/// One launch (kernels::cuda::sgd_flat_step) updating every segment with elements, bit for bit
/// as sgd_step per parameter. param_base / grad_base: the tensors whose first elements are the
/// bases (dtype and device are taken from param_base); momentum_buffer: the flat state buffer
/// (undefined when momentum == 0). Pass only parameters that have a gradient. The segment table
/// is copied to the device through the pinned staging buffer. Returns the kernels launched (1,
/// or 0 when no segment has elements).
int sgd_flat_step(const Tensor& param_base, const Tensor& grad_base, const Tensor& momentum_buffer,
                  const std::vector<FlatUpdateSegment>& segments, double lr, double momentum,
                  double dampening, double weight_decay, bool nesterov,
                  FlatMode mode = FlatMode::Eager, FlatGraphTable* graph = nullptr);
/// The same for Adam / AdamW (kernels::cuda::adam_flat_step), each segment with its own step.
int adam_flat_step(const Tensor& param_base, const Tensor& grad_base, const Tensor& exp_avg,
                   const Tensor& exp_avg_sq, const std::vector<FlatUpdateSegment>& segments,
                   double lr, double beta1, double beta2, double eps, double weight_decay,
                   bool decoupled, FlatMode mode = FlatMode::Eager,
                   FlatGraphTable* graph = nullptr);

}  // namespace lockstep::cuda_ops
