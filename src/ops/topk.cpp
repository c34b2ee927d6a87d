// topk (torch.topk): the k largest (or smallest) elements along a dimension and their indices,
// with their backward (the gradient scattered back to the chosen positions). CPU only.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;

namespace {

// torch's order: NaN above every number; among equal values the lower index first (torch leaves
// ties unspecified; this makes them deterministic).
template <class T>
bool before(T x, std::int64_t i, T y, std::int64_t j, bool largest) {
  const bool nx = x != x, ny = y != y;
  if (nx || ny) {
    if (nx && ny) return i < j;
    return largest ? nx : ny;
  }
  if (x != y) return largest ? x > y : x < y;
  return i < j;
}

}  // namespace

std::pair<Tensor, Tensor> topk(const Tensor& a, std::int64_t k, int dim, bool largest, bool sorted) {
  detail::check_defined("topk", a);
  detail::require_cpu("topk", a);
  if (a.dim() == 0) {  // torch treats a 0-d tensor as one element along dim 0 or -1
    detail::wrap_dim("topk", dim, 1);
    auto [v, i] = topk(a.reshape(Shape{1}), k, 0, largest, sorted);
    return {v.reshape(Shape{}), i.reshape(Shape{})};
  }
  const int d = detail::wrap_dim("topk", dim, a.dim());
  const detail::DimSplit b = detail::split_at_dim(a.shape(), d);
  if (k < 0 || k > b.r)
    throw ValueError("topk: k (" + std::to_string(k) + ") is out of range for dimension " +
                     std::to_string(dim) + " of size " + std::to_string(b.r) + " in " +
                     a.shape().str() + " (selected index k out of range)");
  Shape s = a.shape();
  s[d] = k;
  Tensor values = empty(s, a.options());
  Tensor indices = empty(s, TensorOptions(kInt64));
  auto loop = [&](const auto* pa, auto* pv) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(pa)>>;
    std::int64_t* pi = indices.data_ptr<std::int64_t>();
    std::vector<std::int64_t> order(static_cast<std::size_t>(b.r));
    for (std::int64_t o = 0; o < b.outer; ++o)
      for (std::int64_t in = 0; in < b.inner; ++in) {
        const T* line = pa + o * b.r * b.inner + in;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](std::int64_t i, std::int64_t j) {
                            return before(line[i * b.inner], i, line[j * b.inner], j, largest);
                          });
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t at = (o * k + j) * b.inner + in;
          pv[at] = line[order[static_cast<std::size_t>(j)] * b.inner];
          pi[at] = order[static_cast<std::size_t>(j)];
        }
      }
  };
  switch (a.dtype()) {
    case DType::Float32: loop(a.data_ptr<float>(), values.data_ptr<float>()); break;
    case DType::Float64: loop(a.data_ptr<double>(), values.data_ptr<double>()); break;
    case DType::Int64: loop(a.data_ptr<std::int64_t>(), values.data_ptr<std::int64_t>()); break;
  }
  if (needs_grad({&a}))
    record("TopkBackward", values, {&a}, [src = a.shape(), d, indices](const Tensor& g) {
      Tensor ga = zeros(src, g.options());
      const detail::DimSplit sb = detail::split_at_dim(src, d);
      const std::int64_t kk = indices.dim() == 0 ? 1 : indices.size(d);
      const std::int64_t* pi = indices.data_ptr<std::int64_t>();
      detail::visit_float(g.dtype(), [&](auto zero) {
        using T = decltype(zero);
        const T* pg = g.data_ptr<T>();
        T* po = ga.data_ptr<T>();
        for (std::int64_t o = 0; o < sb.outer; ++o)
          for (std::int64_t j = 0; j < kk; ++j)
            for (std::int64_t in = 0; in < sb.inner; ++in) {
              const std::int64_t at = (o * kk + j) * sb.inner + in;
              po[(o * sb.r + pi[at]) * sb.inner + in] += pg[at];
            }
      });
      return std::vector<Tensor>{ga};
    });
  return {values, indices};
}

}  // namespace lockstep
