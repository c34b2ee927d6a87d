// Selecting elements by position or by a mask: tril, triu (torch.tril/triu) and masked_fill,
// where (torch's, with an int64 or float 0/1 mask standing for torch's bool one). CPU only (no
// CUDA path yet: require_cpu's DeviceError).
#include <cmath>
#include <string>
#include <type_traits>

#include "lockstep/ops/detail/op_utils.h"
#include "ops/strided_plan.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;

namespace {

// Copies `a` keeping element (i, j) of its last two dimensions where keep(j - i), zero elsewhere.
template <class Keep>
Tensor triangle(const char* op, const Tensor& a, std::int64_t diagonal, Keep keep) {
  detail::check_defined(op, a);
  detail::require_cpu(op, a);
  if (a.dim() < 2)
    throw ShapeError(std::string(op) + ": input tensor must have at least 2 dimensions, got " +
                     a.shape().str());
  const std::int64_t rows = a.size(-2), cols = a.size(-1);
  const std::int64_t mats = rows * cols == 0 ? 0 : a.numel() / (rows * cols);
  Tensor out = empty(a.shape(), a.options());
  auto loop = [&](const auto* pa, auto* po) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(pa)>>;
    for (std::int64_t m = 0; m < mats; ++m)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
          const std::int64_t at = (m * rows + i) * cols + j;
          po[at] = keep(j - i - diagonal) ? pa[at] : T(0);
        }
  };
  switch (a.dtype()) {
    case DType::Float32: loop(a.data_ptr<float>(), out.data_ptr<float>()); break;
    case DType::Float64: loop(a.data_ptr<double>(), out.data_ptr<double>()); break;
    case DType::Int64: loop(a.data_ptr<std::int64_t>(), out.data_ptr<std::int64_t>()); break;
  }
  return out;
}

bool mask_at(const Tensor& mask, std::int64_t i) {
  switch (mask.dtype()) {
    case DType::Float32: return mask.data_ptr<float>()[i] != 0;
    case DType::Float64: return mask.data_ptr<double>()[i] != 0;
    case DType::Int64: return mask.data_ptr<std::int64_t>()[i] != 0;
  }
  return false;
}

}  // namespace

Tensor tril(const Tensor& a, std::int64_t diagonal) {
  Tensor out = triangle("tril", a, diagonal, [](std::int64_t d) { return d <= 0; });
  if (needs_grad({&a}))
    record("TrilBackward", out, {&a},
           [diagonal](const Tensor& g) { return std::vector<Tensor>{tril(g, diagonal)}; });
  return out;
}

Tensor triu(const Tensor& a, std::int64_t diagonal) {
  Tensor out = triangle("triu", a, diagonal, [](std::int64_t d) { return d >= 0; });
  if (needs_grad({&a}))
    record("TriuBackward", out, {&a},
           [diagonal](const Tensor& g) { return std::vector<Tensor>{triu(g, diagonal)}; });
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  detail::check_defined("masked_fill", a);
  detail::check_defined("masked_fill", mask);
  detail::require_cpu("masked_fill", a);
  detail::require_cpu("masked_fill", mask);
  if (a.dtype() == kInt64 && !detail::fits_int64(value))
    throw ValueError("masked_fill: value " + std::to_string(value) +
                     " cannot be converted to type int64 without overflow");
  if (a.dtype() == kFloat32 && std::isfinite(value) && std::fabs(value) > 3.4028234663852886e38)
    throw ValueError("masked_fill: value " + std::to_string(value) +
                     " cannot be converted to type float without overflow");  // torch's wording
  const Shape s = detail::broadcast_shapes("masked_fill", a.shape(), mask.shape());
  Tensor out = empty(s, a.options());
  const detail::StridedIter it = detail::broadcast_iter(s, a.shape(), mask.shape());
  auto loop = [&](const auto* pa, auto* po) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(pa)>>;
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i) {
      std::int64_t oa = 0, om = 0;
      kernels::shared::strided_offsets(it, i, oa, om);
      po[i] = mask_at(mask, om) ? v : pa[oa];
    }
  };
  switch (a.dtype()) {
    case DType::Float32: loop(a.data_ptr<float>(), out.data_ptr<float>()); break;
    case DType::Float64: loop(a.data_ptr<double>(), out.data_ptr<double>()); break;
    case DType::Int64: loop(a.data_ptr<std::int64_t>(), out.data_ptr<std::int64_t>()); break;
  }
  if (needs_grad({&a}))
    record("MaskedFillBackward", out, {&a}, [mask = mask.detach(), src = a.shape()](const Tensor& g) {
      return std::vector<Tensor>{detail::sum_to(masked_fill(g, mask, 0.0), src)};
    });
  return out;
}

Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y) {
  detail::check_same("where", x, y);
  detail::check_defined("where", condition);
  detail::require_cpu("where", condition);
  detail::require_cpu("where", x);
  const Shape s = detail::broadcast_shapes(
      "where", detail::broadcast_shapes("where", condition.shape(), x.shape()), y.shape());
  Tensor out = empty(s, x.options());
  // One iteration space, two plans over it: x's and y's offsets, and the condition's.
  const detail::StridedIter xy = detail::broadcast_iter(s, x.shape(), y.shape());
  const detail::StridedIter cc = detail::broadcast_iter(s, condition.shape(), condition.shape());
  auto loop = [&](const auto* px, const auto* py, auto* po) {
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i) {
      std::int64_t ox = 0, oy = 0, oc = 0, unused = 0;
      kernels::shared::strided_offsets(xy, i, ox, oy);
      kernels::shared::strided_offsets(cc, i, oc, unused);
      po[i] = mask_at(condition, oc) ? px[ox] : py[oy];
    }
  };
  switch (x.dtype()) {
    case DType::Float32: loop(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>()); break;
    case DType::Float64: loop(x.data_ptr<double>(), y.data_ptr<double>(), out.data_ptr<double>()); break;
    case DType::Int64:
      loop(x.data_ptr<std::int64_t>(), y.data_ptr<std::int64_t>(), out.data_ptr<std::int64_t>());
      break;
  }
  if (needs_grad({&x, &y}))
    record("WhereBackward", out, {&x, &y},
           [c = condition.detach(), xs = x.shape(), ys = y.shape(), rx = x.requires_grad(),
            ry = y.requires_grad()](const Tensor& g) {
             const Tensor not_c = eq(c, zeros(Shape{}, c.options()));
             return std::vector<Tensor>{rx ? detail::sum_to(masked_fill(g, not_c, 0.0), xs) : Tensor(),
                                        ry ? detail::sum_to(masked_fill(g, c, 0.0), ys) : Tensor()};
           });
  return out;
}

}  // namespace lockstep
