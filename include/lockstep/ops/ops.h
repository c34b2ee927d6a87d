// Differentiable operations on tensors (the torch.* functional API). Every op checks its inputs
// and throws a typed error naming shapes/dtypes/devices: ShapeError, DTypeError, DeviceError,
// IndexError, ValueError. Binary elementwise ops broadcast as NumPy/PyTorch do and require both
// operands to have the same dtype and device. Autograd records an op when grad mode is on and
// any input requires grad.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/generator.h"
#include "lockstep/core/tensor.h"
#include "lockstep/ops/attention.h"
#include "lockstep/ops/batch_norm.h"
#include "lockstep/ops/conv.h"
#include "lockstep/ops/embedding.h"
#include "lockstep/ops/layer_norm.h"
#include "lockstep/ops/pool.h"

namespace lockstep {

// ---- elementwise, broadcasting ---------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
/// Float dtypes only.
Tensor div(const Tensor& a, const Tensor& b);
/// a + s and a · s elementwise for a scalar s, in a's dtype and on a's device. An int64 tensor
/// with an s that is not an integer in int64's range (1.5, 1e30, NaN) gives a float32 result,
/// as PyTorch's type promotion does for an integer tensor and a float scalar (torch.tensor([1]) +
/// 1.5 is tensor([2.5])); with an integral s it stays int64 and wraps on overflow, as PyTorch's
/// integer scalars (LibTorch's `t + 2`). sub(a, s) = a − s follows the same rule for s itself
/// (x − (−2^63) is int64, x − 2^63 float32), and `a / s` of an int64 tensor is always float32
/// true division (x / 1 and x / 0.5 too), as torch's `/`.
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
/// a^p elementwise for a scalar exponent (float dtypes).
Tensor pow(const Tensor& a, double p);
/// torch.eq, ne, lt, le, gt, ge: `a op b` elementwise as int64 0/1 (torch returns bool; Lockstep
/// has no bool dtype, so a comparison's result is the 0/1 mask that masked_fill and where take);
/// no gradient; shapes broadcast. IEEE rules: NaN compares false, except ne. Same dtype and
/// device (DTypeError / DeviceError), ShapeError naming both shapes when they do not broadcast.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
/// GELU, exact form x·Φ(x) = x/2·(1 + erf(x/√2)) (torch.nn.functional.gelu, approximate='none').
/// float32 is computed in float (as PyTorch's CPU kernel; erf within 3 ulp, Φ's negative tail as
/// erfc/2 so it keeps its relative accuracy; src/ops/float_math.h), vectorised on the CPU with
/// the same bits as on a GPU; float64 in double with the C library's erf.
Tensor gelu(const Tensor& a);
/// torch.nn.functional.gelu(a, approximate=...): "none" is gelu(a) above, "tanh" the
/// approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (PyTorch's formula and backward, in
/// double, rounded once). ValueError for any other string.
Tensor gelu(const Tensor& a, const std::string& approximate);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
/// a / s: a true division by s rounded once, as torch's `/` (float32 -7 / 3 is
/// -2.3333332538604736, not the product with the rounded reciprocal, -2.3333334922790527); an
/// int64 tensor divides in float32 whatever s is.
inline Tensor operator/(const Tensor& a, double s) {
  const Tensor f = a.dtype() == DType::Int64 ? a.to(DType::Float32) : a;
  return div(f, scalar_tensor(s, f.options()));
}
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }

// ---- linear algebra --------------------------------------------------------------------------
/// [M, K] x [K, N] -> [M, N] (float dtypes); OpenBLAS cblas_sgemm/cblas_dgemm. With more than
/// two dimensions, torch.matmul's batched product [..., M, K] x [..., K, N] -> [..., M, N] when
/// the leading (batch) dimensions are identical, or one operand's are all 1 or missing (a 2-d
/// weight against a batch: broadcast); on the CPU one GEMM per batch index, the batch split over
/// the intra-op team with each GEMM on one thread (the bits do not depend on the thread count).
/// ShapeError naming both shapes for 1-d or 0-d inputs, mismatched inner dimensions, or batch
/// dimensions that broadcast otherwise (torch.matmul's general broadcasting is not built).
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x Wᵀ + b (torch.nn.functional.linear): x [B, in], weight [out, in], bias [out] or
/// undefined -> [B, out]. One GEMM; the bias is added in the same pass.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- reductions ------------------------------------------------------------------------------
/// Sum of all elements (0-d). Float sums accumulate in double.
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, int dim, bool keepdim = false);
/// Mean of all elements (NaN for an empty tensor, as PyTorch). Float dtypes.
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int dim, bool keepdim = false);
/// Largest element (0-d). Throws ShapeError on an empty tensor.
Tensor max(const Tensor& a);
/// (values, indices) of the maxima along `dim` (first index on ties; a NaN is the maximum, at
/// its first index), as torch.max(a, dim).
std::pair<Tensor, Tensor> max(const Tensor& a, int dim, bool keepdim = false);
/// Index of the largest element along `dim` (int64, first on ties; the first NaN if any), as
/// torch.argmax.
Tensor argmax(const Tensor& a, int dim, bool keepdim = false);
/// Index of the largest element of the flattened tensor (0-d int64; first on ties, the first NaN
/// if any), as torch.argmax.
Tensor argmax(const Tensor& a);
/// log(softmax(x)) along dim 1 of a [N, C] tensor, computed stably (max subtracted).
Tensor log_softmax(const Tensor& x, int dim = 1);
Tensor softmax(const Tensor& x, int dim = 1);

// ---- shape and indexing ----------------------------------------------------------------------
/// Same data, new shape with the same numel; one dimension may be -1. View (no copy).
Tensor reshape(const Tensor& a, const Shape& shape);
/// torch.flatten: dims [start_dim, end_dim] merged into one (negative dims count from the end);
/// a view, as reshape. IndexError for a dim outside the tensor or start_dim > end_dim; a 0-d
/// tensor gives [1].
Tensor flatten(const Tensor& a, int start_dim = 0, int end_dim = -1);
/// Transpose of a 2-d tensor (a copy, since tensors are contiguous).
Tensor t(const Tensor& a);
/// torch.transpose: dimensions dim0 and dim1 swapped (negative dims count from the end); a copy.
/// IndexError for a dim outside the tensor.
Tensor transpose(const Tensor& a, int dim0, int dim1);
/// torch.permute: output dimension i is input dimension dims[i] (negative allowed); a copy whose
/// backward applies the inverse permutation. IndexError unless dims is a permutation of the
/// tensor's dimensions.
Tensor permute(const Tensor& a, const std::vector<int>& dims);
/// Elements [start, start+length) along `dim`. A view for dim 0, a copy otherwise.
Tensor narrow(const Tensor& a, int dim, std::int64_t start, std::int64_t length);
/// Rows (or slices along `dim`) picked by a 1-d int64 `index`; IndexError when out of range.
Tensor index_select(const Tensor& a, int dim, const Tensor& index);
/// Concatenation along `dim`; all other dimensions must match (ShapeError otherwise).
Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);
/// torch.chunk: ceil(n/chunks)-sized pieces, so fewer than `chunks` pieces may come back.
std::vector<Tensor> chunk(const Tensor& a, std::int64_t chunks, int dim = 0);
/// torch.tensor_split: exactly `sections` pieces whose sizes differ by at most one, larger first
/// (9 into 4 -> 3,2,2,2); some may be empty.
std::vector<Tensor> tensor_split(const Tensor& a, std::int64_t sections, int dim = 0);
/// torch.split(a, split_size, dim): pieces of split_size along `dim`, the last one smaller when
/// split_size does not divide the size (narrow of each: views along dim 0, copies otherwise); a
/// size-0 dimension gives one empty piece. ValueError for split_size <= 0 (torch allows 0 only on
/// an empty dimension).
std::vector<Tensor> split(const Tensor& a, std::int64_t split_size, int dim = 0);
/// Split sizes of tensor_split(n, sections) without touching data.
std::vector<std::int64_t> split_sizes(std::int64_t n, std::int64_t sections);

// ---- selection (src/ops/mask.cpp, topk.cpp; CPU only: DeviceError on a GPU) -------------------
/// torch.tril / torch.triu: a copy of `a` (at least 2-d; the last two dimensions are the matrix,
/// batched over the rest) with the elements above (tril) or below (triu) the `diagonal`-th
/// diagonal zeroed (0 the main one, > 0 above it, < 0 below). Any dtype; the gradient is tril/triu
/// of the incoming one. ShapeError for fewer than 2 dimensions.
Tensor tril(const Tensor& a, std::int64_t diagonal = 0);
Tensor triu(const Tensor& a, std::int64_t diagonal = 0);
/// torch.Tensor.masked_fill: `a` with `value` where `mask` is nonzero. The mask is an int64 or
/// float 0/1 tensor (torch takes bool; Lockstep has no bool dtype: a comparison's result, eq/lt/...,
/// is such a mask); a and mask broadcast (the result has their broadcast shape). The gradient
/// flows to a where the mask is 0. ShapeError naming both shapes when they do not broadcast;
/// ValueError for an int64 `a` and a value int64 cannot hold (±inf, NaN, ≥ 2^63).
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);
/// torch.where(condition, x, y): x where condition (int64 or float, nonzero = true) else y,
/// in the broadcast shape of the three; x and y of one dtype and device (DTypeError / DeviceError).
/// Gradients flow to x where the condition holds and to y elsewhere.
Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y);
/// torch.topk: the k largest (largest = true) or smallest elements along `dim` and their int64
/// indices, each of a's shape with size k along dim, in order (largest first, or smallest first;
/// `sorted` is accepted, the result is always sorted). NaN counts as larger than every number, as
/// torch's; equal values come lowest index first (torch leaves ties unspecified). Any dtype; the
/// gradient is scattered back to the chosen positions. IndexError for dim outside a; ValueError
/// for k < 0 or k > a.size(dim) ("selected index k out of range").
std::pair<Tensor, Tensor> topk(const Tensor& a, std::int64_t k, int dim = -1, bool largest = true,
                               bool sorted = true);

// ---- losses and regularisation ---------------------------------------------------------------
/// Mean cross-entropy of logits [N, C] against class indices target [N] (int64), as
/// torch.nn.functional.cross_entropy(reduction='mean'): targets equal to ignore_index are skipped
/// and the mean is over the rest. IndexError naming the row when a target is outside [0, C).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::int64_t ignore_index = -100);
/// mean((input - target)^2) over all elements (torch.nn.functional.mse_loss); shapes must match.
Tensor mse_loss(const Tensor& input, const Tensor& target);
/// Inverted dropout (torch.nn.functional.dropout): in training each element is zeroed with
/// probability p and the rest scaled by 1/(1-p); identity when !training or p == 0. ValueError
/// for p outside [0, 1].
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

/// Keys dropout masks on the calling thread by (seed, step, global sample index) instead of a
/// generator: element j of row r of the c-th dropout call in the scope keeps with a draw from
/// Philox at counter (sample_offset + r, step, c, j / 4), key seed. A sample's mask then does not
/// depend on which device or chunk processes it. DataParallel installs one per replica forward.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  std::int64_t sample_offset = 0;
};

/// RAII: installs `key` (and resets the dropout call counter) for the calling thread.
class DropoutKeyGuard {
 public:
  explicit DropoutKeyGuard(const DropoutKey& key);
  ~DropoutKeyGuard();
  DropoutKeyGuard(const DropoutKeyGuard&) = delete;
  DropoutKeyGuard& operator=(const DropoutKeyGuard&) = delete;

 private:
  bool had_;
  DropoutKey prev_;
  std::uint32_t prev_calls_;
};

}  // namespace lockstep
