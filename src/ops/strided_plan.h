// Internal: host-side planning of the strided CUDA kernels (src/ops/device_ops.h's StridedIter
// and ReducePlan) from shapes: NumPy/PyTorch broadcasting of a binary op, a reduction to a
// broadcast-compatible shape (sum_to, sum along a dimension), a slice along a dimension (narrow,
// cat, their backward) and the 2-d transpose. Plain C++, tested without a GPU
// (tests/ops/device_ops_test.cpp, StridedPlan.*, walks the plans on the host against the CPU kernels).
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/core/shape.h"
#include "ops/device_ops.h"

namespace lockstep::detail {

using kernels::shared::ReducePlan;
using kernels::shared::StridedIter;

/// Contiguous (row-major) element strides of `s`.
std::array<std::int64_t, Shape::kMaxDims> contiguous_strides(const Shape& s);

/// Drops size-1 dimensions and merges neighbours that both operands (and a contiguous output of
/// the same sizes) walk as one: the same positions in the same order, fewer index divisions.
void coalesce(StridedIter& it);

/// out = a op b with broadcasting: the iteration space is `out` in row-major order (the output
/// index is the linear position), operand 0 is a, operand 1 is b, each with stride 0 along the
/// dimensions it broadcasts (missing leading ones or size 1). a and b must broadcast to out
/// (ValueError otherwise: the op layer checks first).
StridedIter broadcast_iter(const Shape& out, const Shape& a, const Shape& b);

/// Reduction of `in` to `out`, where out (right-aligned, missing leading dims = 1) has each
/// dimension equal to in's or 1 (ValueError otherwise). See ReducePlan.
ReducePlan reduce_plan(const Shape& in, const Shape& out);

/// A slice [start, start + len) along dimension d of a contiguous tensor of shape `full`,
/// against a contiguous tensor of the slice's shape. The iteration space is the slice's shape;
/// operand 0 is the slice (contiguous), operand 1 the full tensor, whose offsets are relative
/// to *full_base = start · stride(d).
StridedIter slice_iter(const Shape& full, int d, std::int64_t start, std::int64_t len,
                       std::int64_t* full_base);

/// t() of a contiguous [rows, cols] tensor: the iteration space is the output [cols, rows];
/// operand 0 is the output (contiguous), operand 1 the input.
StridedIter transpose_iter(std::int64_t rows, std::int64_t cols);

/// permute(dims) of a contiguous tensor of shape `in` (dims: a permutation of 0..in.size()-1,
/// already checked): the iteration space is the output (dimension i of size in[dims[i]]);
/// operand 0 is the output (contiguous), operand 1 the input.
StridedIter permute_iter(const Shape& in, const std::vector<int>& dims);

}  // namespace lockstep::detail
