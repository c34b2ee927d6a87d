// Internal: the CUDA paths of the Tensor ops, at the level of tensors. The op layer (src/ops/,
// the Tensor methods of src/ops/tensor_*.cpp included) checks shapes, dtypes and devices and
// builds the autograd graph as on the CPU, then calls these for cuda:k tensors; the paths the
// layers above call themselves (optimizer updates, deterministic mode's tree) are declared in
// lockstep/ops/detail/cuda_steps.h.
// Implemented in src/ops/cuda/tensor_ops.cpp on top of kernels::cuda (src/ops/cuda/kernels.h); in
// builds without CUDA, src/ops/cuda_stub.cpp stands in (no cuda:k tensor can exist there, so it
// is never reached and throws DeviceError if it is). No CUDA header is included here.
//
// Conventions: tensors are contiguous, already checked (shapes, same dtype, same device unless
// said otherwise), float32 or float64 unless said otherwise; outputs are allocated by the
// caller on the inputs' device. Everything is enqueued on the device's compute stream
// (runtime.h), so it returns before the GPU has finished, except what returns host values.
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/ops/detail/cuda_steps.h"  // the paths optim and parallel call
#include "ops/device_ops.h"
#include "ops/kernels.h"

namespace lockstep::cuda_ops {

/// dst ← src, byte for byte: same dtype and numel, any pair of devices of which at least one is
/// CUDA (host to device through a pinned staging buffer up to 64 MiB, directly above; device to
/// host waits for the copy; between two GPUs waits for both).
void copy(const Tensor& src, const Tensor& dst);
/// t[i] = value converted to t's dtype (float32, float64, int64).
void fill(const Tensor& t, double value);
/// out = a op b where a and b have out's numel, or one of them has one element (broadcast).
void binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
/// self += alpha · other, other of self's numel or of one element (Tensor::add_).
void add_(const Tensor& self, const Tensor& other, double alpha);
/// self *= value (Tensor::mul_).
void mul_(const Tensor& self, double value);
/// out = −x.
void neg(const Tensor& x, const Tensor& out);
/// out = relu(x); grad_in = relu'(y)·g (threshold_backward on the result y).
void relu(const Tensor& x, const Tensor& out);
void relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in);
/// out = tanh(x); grad_in = g·(1 − y²) on the result y.
void tanh(const Tensor& x, const Tensor& out);
void tanh_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in);
/// out (one element) = Σ x / divisor, accumulated in double (sum: 1, mean: numel).
void sum_all(const Tensor& x, double divisor, const Tensor& out);
/// out[j] = Σ_i g[i, j] for g [rows, cols], out [cols] (Linear's bias gradient).
void bias_grad(const Tensor& g, const Tensor& out);
/// c[m, n] = op(a) op(b) (the CPU gemm2d contract of src/ops/linalg.cpp: row strides
/// a.size(1), b.size(1), n). bf16 (float32 only): autocast's GEMM (lockstep/ops/autocast.h) —
/// a and b cast to bf16, kernels::cuda::gemm_bf16, c rounded to bf16 once.
void gemm2d(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
            bool bf16 = false);
/// c (count·m·n contiguous elements) = op(A_i) op(B_i), i < count, in one cuBLAS call
/// (kernels::cuda::gemm_strided_batched): A_i starts stride_a elements after A_{i−1} in a, B_i
/// stride_b after B_{i−1} in b (0: one matrix for every i), float32 or float64.
void gemm_batched(const Tensor& a, bool trans_a, std::int64_t stride_a, const Tensor& b,
                  bool trans_b, std::int64_t stride_b, std::int64_t count, std::int64_t m,
                  std::int64_t n, std::int64_t k, const Tensor& c);
/// y[rows, out] = x[rows, in] · w[out, in]ᵀ + bias (bias may be undefined). bf16 (float32
/// only): x, w and bias rounded to bf16, the fp32 sum rounded to bf16 once.
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
            std::int64_t rows, std::int64_t in, std::int64_t out, bool bf16 = false);
/// dst = round_to_bfloat16(src) elementwise (float32, same numel; dst may be src).
void round_to_bfloat16(const Tensor& src, const Tensor& dst);

/// What the fused cross-entropy forward leaves in its scratch tensor, read on the host.
struct CrossEntropyStats {
  double loss_sum = 0;
  std::int64_t count = 0;            ///< rows whose target is not ignore_index
  std::int64_t invalid = 0;          ///< rows whose target is out of range (the caller throws)
  std::int64_t first_bad_row = -1;   ///< the first such row (−1: none)
  std::int64_t first_bad_value = 0;  ///< its target
};
/// Enqueues the softmax of logits [n, c] into prob, the loss sum, count, invalid count and
/// first invalid (row, target) into `scratch` (an int64 [5] tensor on the device, also read by
/// cross_entropy_backward) and the mean loss into `loss` (a one-element tensor of logits' dtype
/// on the device; NaN when count is 0). int64 target [n] on the same device. Nothing is read
/// back: capturable in a CUDA graph.
void cross_entropy_forward(const Tensor& logits, const Tensor& target, std::int64_t ignore_index,
                           const Tensor& prob, const Tensor& scratch, const Tensor& loss);
/// Reads `scratch` of cross_entropy_forward back to the host (one synchronising copy; a
/// CudaError while the device's stream is being captured).
CrossEntropyStats cross_entropy_stats(const Tensor& scratch);
/// grad_logits = (prob − onehot(target)) · g / max(count, 1), 0 on ignored rows; g a
/// one-element tensor on the device, count from `scratch`.
void cross_entropy_backward(const Tensor& prob, const Tensor& target, std::int64_t ignore_index,
                            const Tensor& scratch, const Tensor& g, const Tensor& grad_logits);


// ---- the ops beyond the reference workload (docs/cuda.md) --------------------------------------
// Same conventions; the kernels' bodies are src/ops/device_ops.h (the CPU ops' expressions) and
// their index plans src/ops/strided_plan.h. "Along d" views a tensor as [outer, size(d), inner].

/// The elementwise math ops with a CUDA path beyond neg / relu / tanh.
enum class MathOp { Exp, Log, Sqrt, Pow, Sigmoid, Gelu, GeluTanh };
/// y = f(x) (param: pow's exponent).
void math(MathOp op, const Tensor& x, const Tensor& y, double param = 0);
/// gi = df(g, saved): saved is the forward's result for Sqrt and Sigmoid, its input for Pow and
/// Gelu and GeluTanh (Exp and Log compose from mul / div).
void math_backward(MathOp op, const Tensor& g, const Tensor& saved, const Tensor& gi,
                   double param = 0);
/// out (int64, the broadcast shape of a and b) = 1 where `a op b`, else 0 (torch.eq, ne, lt, le,
/// gt, ge; kernels::shared::compare_one's IEEE rules); float, double, int64.
void compare(kernels::shared::Compare op, const Tensor& a, const Tensor& b, const Tensor& out);
/// out = a op b where a and b broadcast to out's shape (NumPy rules, any ranks); float, double
/// and int64 (no int64 division). out must not alias a or b.
void binary_broadcast(kernels::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
/// out = in summed over the dimensions where out (right-aligned) has size 1 and in does not
/// (sum_to; sum along a dimension with out shaped with 1 there): double accumulation for floats,
/// int64 for int64, increasing input index per output (the CPU's order and bits).
void sum_to(const Tensor& in, const Tensor& out);
/// y = softmax (log = false) or log_softmax of x along d.
void softmax(const Tensor& x, int d, bool log, const Tensor& y);
/// values (may be undefined) and int64 indices of max along d (size(d) ≥ 1), shaped
/// [outer, inner] in memory; the CPU's rules (first index; NaN only at index 0 stays).
void max_dim(const Tensor& x, int d, const Tensor& values, const Tensor& indices);
/// gi (x's shape, zeroed by the caller) at the indices of max along d ← g.
void max_dim_backward(const Tensor& g, const Tensor& indices, int d, const Tensor& gi);
/// Whole-tensor max (argmax_rule false: last NaN, else first largest) or argmax (true: 0 when
/// element 0 is NaN, else the first largest non-NaN) of x (numel ≥ 1): index (int64, one
/// element) and value (one element, may be undefined).
void max_all(const Tensor& x, bool argmax_rule, const Tensor& value, const Tensor& index);
/// gi = g / ties where x == best, 0 elsewhere (best, g: one-element device tensors).
void max_all_backward(const Tensor& x, const Tensor& best, const Tensor& g, const Tensor& gi);
/// out [cols, rows] = aᵀ for a [rows, cols] (float, double, int64).
void transpose2d(const Tensor& a, const Tensor& out);
/// out = a.permute(dims) as a contiguous copy (dims checked; float, double, int64): the strided
/// copy over detail::permute_iter (src/ops/cuda/permute.cpp).
void permute(const Tensor& a, const std::vector<int>& dims, const Tensor& out);
/// slice ← full[start : start + slice.size(d)] along d (narrow's copy).
void slice_out(const Tensor& full, int d, std::int64_t start, const Tensor& slice);
/// full[start : start + slice.size(d)] along d ← slice (cat, narrow's backward).
void slice_in(const Tensor& slice, int d, std::int64_t start, const Tensor& full);
/// out = a.index_select(d, index), index an int64 tensor on a's device whose values the caller
/// has checked to lie in [0, a.size(d)).
void index_select(const Tensor& a, int d, const Tensor& index, const Tensor& out);
/// gi (the input's shape; all written) = index_select's backward: g's slices summed into the
/// selected positions in increasing index position, as the CPU.
void index_select_backward(const Tensor& g, int d, const Tensor& index, const Tensor& gi);
/// Keyed dropout mask (see kernels::cuda::dropout_mask_keyed): mask viewed as [rows, cols].
void dropout_mask_keyed(const Tensor& mask, std::int64_t rows, std::int64_t cols,
                        std::uint64_t seed, std::uint64_t step, std::uint32_t call,
                        std::int64_t sample_offset, double p, double scale);
/// Sequential dropout mask from a Generator's stream (seed, position `offset` in 32-bit words;
/// the caller advances the generator by 2 · numel).
void dropout_mask_stream(const Tensor& mask, std::uint64_t seed, std::uint64_t offset, double p,
                         double scale);

}  // namespace lockstep::cuda_ops
