// Checks and helpers shared by the op implementations.
#pragma once

#include <cmath>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/core/tensor.h"
#include "lockstep/ops/ops.h"
#include "lockstep/core/detail/wrap_dim.h"  // wrap_dim, for the ops too

namespace lockstep::detail {

/// True when the double d converts to int64 without overflow: -2^63 <= d < 2^63 (false for NaN;
/// the conversion of anything else is undefined behaviour in C++).
inline bool fits_int64(double d) { return d >= -0x1p63 && d < 0x1p63; }
/// True when d is an integer that int64 holds: the scalars that keep an int64 tensor int64 (any
/// other promotes to float, or is refused in place, as PyTorch).
inline bool is_int64_value(double d) { return fits_int64(d) && std::trunc(d) == d; }

inline void check_defined(const char* op, const Tensor& t) {
  if (!t.defined()) throw ValueError(std::string(op) + ": got an undefined tensor");
}

inline void check_same(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  if (a.device() != b.device())
    throw DeviceError(std::string(op) + ": expected all tensors on the same device, got " +
                      a.device().str() + " and " + b.device().str());
  if (a.dtype() != b.dtype())
    throw DTypeError(std::string(op) + ": expected the same dtype, got " + to_string(a.dtype()) +
                     " and " + to_string(b.dtype()));
}

/// Ops without a CUDA path call this first: DeviceError naming the op and the device for a tensor
/// that is not on a CPU device (instead of the generic data_ptr error deeper down).
inline void require_cpu(const char* op, const Tensor& t) {
  if (t.defined() && !t.device().is_cpu()) [[unlikely]]
    throw DeviceError(std::string(op) + ": not implemented on " + t.device().str() +
                      " (this op has no CUDA path yet; docs/cuda.md lists the ones that do; "
                      "copy the tensor to the host with .to(lockstep::cpu()) first)");
}

/// DeviceError for a CUDA path that exists only for some inputs (e.g. no broadcasting).
[[noreturn]] inline void not_on_cuda(const char* op, const Tensor& t, const std::string& what) {
  throw DeviceError(std::string(op) + ": " + what + " is not implemented on " + t.device().str() +
                    " (docs/cuda.md lists what is)");
}

inline void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t);
  if (!is_floating(t.dtype()))
    throw DTypeError(std::string(op) + ": expected a float32 or float64 tensor, got " +
                     to_string(t.dtype()) + " " + t.shape().str());
}

/// Broadcast shape of a and b (NumPy rules); ShapeError naming both shapes otherwise.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

/// Dispatches `f` with a typed zero value for float32/float64 (and int64 when allowed).
template <class F>
decltype(auto) visit_float(DType t, F&& f) {
  if (t == DType::Float64) return f(double{});
  return f(float{});
}

/// Gradient `g` reduced to `shape` (sum over broadcast dimensions), differentiable.
Tensor sum_to(const Tensor& g, const Shape& shape);

/// A tensor aliasing `base`'s storage at `offset` elements with `shape` (no autograd).
Tensor alias(const Tensor& base, std::int64_t offset, const Shape& shape);

/// Autocast's bf16 rounding (lockstep/ops/autocast.h, round_to_bfloat16 per element) of a
/// contiguous float32 tensor on the CPU or a GPU: into `dst` (same shape and device; may be
/// `src` itself), into a new tensor, or in place. No autograd.
void round_to_bfloat16_into(const Tensor& src, const Tensor& dst);
Tensor round_to_bfloat16(const Tensor& t);
void round_to_bfloat16_(const Tensor& t);

/// A shape seen around dimension d (0 <= d < s.size()): `outer` is the product of the sizes
/// before d, `r` the size of d, `inner` the product of the sizes after it, i.e. the contiguous
/// [outer, r, inner] view every op along a dimension (reductions, softmax, cat, narrow, the CUDA
/// kernels' lines) works on.
struct DimSplit {
  std::int64_t outer = 1, r = 1, inner = 1;
};
inline DimSplit split_at_dim(const Shape& s, int d) {
  DimSplit out;
  for (int i = 0; i < s.size(); ++i) (i < d ? out.outer : i == d ? out.r : out.inner) *= s[i];
  return out;
}

}  // namespace lockstep::detail
