// transpose and permute (torch.transpose / torch.permute): contiguous copies, since tensors are
// contiguous, over the strided plan detail::permute_iter (src/ops/strided_plan.h), which the
// CUDA path launches as one strided copy; backward is the inverse permutation.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/strided_plan.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;

namespace {

// dst[offset0(i)] = src[offset1(i)] over the iteration space of `it` (nd ≥ 1 after coalescing
// unless it is one element), moved as words W: an odometer over all but the last dimension and
// a run (a memcpy when both strides are 1) along the last.
template <class W>
void permute_copy(const detail::StridedIter& it, const W* src, W* dst) {
  if (it.nd == 0) {
    *dst = *src;
    return;
  }
  const int last = it.nd - 1;
  const std::int64_t len = it.sizes[last], s0 = it.strides[0][last], s1 = it.strides[1][last];
  std::int64_t idx[kernels::shared::kMaxDims] = {};
  std::int64_t o0 = 0, o1 = 0;
  for (;;) {
    if (s0 == 1 && s1 == 1)
      std::memcpy(dst + o0, src + o1, static_cast<std::size_t>(len) * sizeof(W));
    else
      for (std::int64_t j = 0; j < len; ++j) dst[o0 + j * s0] = src[o1 + j * s1];
    int d = last - 1;
    for (; d >= 0; --d) {  // odometer step over the outer dimensions
      o0 += it.strides[0][d];
      o1 += it.strides[1][d];
      if (++idx[d] < it.sizes[d]) break;
      o0 -= it.strides[0][d] * it.sizes[d];
      o1 -= it.strides[1][d] * it.sizes[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// The checked permutation (each dim wrapped, each input dimension once).
std::vector<int> checked_dims(const Tensor& a, const std::vector<int>& dims) {
  auto text = [&] {
    std::string s = "(";
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + ")";
  };
  if (static_cast<int>(dims.size()) != a.dim())
    throw IndexError("permute: dims " + text() + " name " + std::to_string(dims.size()) +
                     " dimensions, but the tensor " + a.shape().str() + " has " +
                     std::to_string(a.dim()));
  std::vector<int> out;
  std::vector<bool> seen(dims.size(), false);
  for (int d : dims) {
    const int w = detail::wrap_dim("permute", d, a.dim());
    if (seen[static_cast<std::size_t>(w)])
      throw IndexError("permute: dimension " + std::to_string(w) + " appears twice in dims " +
                       text() + " (shape " + a.shape().str() + ")");
    seen[static_cast<std::size_t>(w)] = true;
    out.push_back(w);
  }
  return out;
}

}  // namespace

Tensor permute(const Tensor& a, const std::vector<int>& dims) {
  detail::check_defined("permute", a);
  const std::vector<int> p = checked_dims(a, dims);
  Shape s;
  for (int d : p) s.push_back(a.size(d));
  Tensor out = empty(s, a.options());
  if (a.device().is_cuda()) {
    cuda_ops::permute(a, p, out);
  } else if (out.numel() > 0) {
    const detail::StridedIter it = detail::permute_iter(a.shape(), p);
    if (element_size(a.dtype()) == 4)
      permute_copy(it, static_cast<const std::uint32_t*>(a.raw_data()),
                   static_cast<std::uint32_t*>(out.raw_data()));
    else
      permute_copy(it, static_cast<const std::uint64_t*>(a.raw_data()),
                   static_cast<std::uint64_t*>(out.raw_data()));
  }
  if (needs_grad({&a})) {
    std::vector<int> inverse(p.size());
    for (std::size_t i = 0; i < p.size(); ++i)
      inverse[static_cast<std::size_t>(p[i])] = static_cast<int>(i);
    record("PermuteBackward", out, {&a},
           [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; });
  }
  return out;
}

Tensor transpose(const Tensor& a, int dim0, int dim1) {
  detail::check_defined("transpose", a);
  const int d0 = detail::wrap_dim("transpose", dim0, a.dim());
  const int d1 = detail::wrap_dim("transpose", dim1, a.dim());
  std::vector<int> dims(static_cast<std::size_t>(a.dim()));
  for (int i = 0; i < a.dim(); ++i) dims[static_cast<std::size_t>(i)] = i;
  std::swap(dims[static_cast<std::size_t>(d0)], dims[static_cast<std::size_t>(d1)]);
  return permute(a, dims);
}

}  // namespace lockstep
