// Host-side planning of the strided CUDA kernels (see strided_plan.h).
#include "ops/strided_plan.h"

#include <string>

#include "lockstep/core/error.h"

namespace lockstep::detail {

std::array<std::int64_t, Shape::kMaxDims> contiguous_strides(const Shape& s) {
  std::array<std::int64_t, Shape::kMaxDims> st{};
  std::int64_t stride = 1;
  for (int i = s.size() - 1; i >= 0; --i) {
    st[static_cast<std::size_t>(i)] = stride;
    stride *= s[i];
  }
  return st;
}

void coalesce(StridedIter& it) {
  StridedIter out;
  for (int d = 0; d < it.nd; ++d) {
    if (it.sizes[d] == 1) continue;
    const int last = out.nd - 1;
    if (last >= 0 && out.strides[0][last] == it.strides[0][d] * it.sizes[d] &&
        out.strides[1][last] == it.strides[1][d] * it.sizes[d]) {
      // The previous dimension steps exactly over this one: one dimension of both sizes.
      out.sizes[last] *= it.sizes[d];
      out.strides[0][last] = it.strides[0][d];
      out.strides[1][last] = it.strides[1][d];
      continue;
    }
    out.sizes[out.nd] = it.sizes[d];
    out.strides[0][out.nd] = it.strides[0][d];
    out.strides[1][out.nd] = it.strides[1][d];
    ++out.nd;
  }
  it = out;
}

namespace {

// Strides of `s` right-aligned to nd dimensions, 0 where s has size 1 or no dimension; nullopt
// when s does not broadcast to `to`.
bool aligned_strides(const Shape& s, const Shape& to, std::int64_t* out) {
  const int nd = to.size();
  if (s.size() > nd) return false;
  const auto cs = contiguous_strides(s);
  for (int o = 0; o < nd; ++o) {
    const int i = s.size() - nd + o;
    if (i < 0) {
      out[o] = 0;
      continue;
    }
    if (s[i] != to[o] && s[i] != 1) return false;
    out[o] = s[i] == 1 ? 0 : cs[static_cast<std::size_t>(i)];
  }
  return true;
}

}  // namespace

StridedIter broadcast_iter(const Shape& out, const Shape& a, const Shape& b) {
  StridedIter it;
  it.nd = out.size();
  for (int d = 0; d < it.nd; ++d) it.sizes[d] = out[d];
  if (!aligned_strides(a, out, it.strides[0]) || !aligned_strides(b, out, it.strides[1]))
    throw ValueError("broadcast_iter: " + a.str() + " and " + b.str() + " do not broadcast to " +
                     out.str());
  if (out.numel() > 0) coalesce(it);
  return it;
}

ReducePlan reduce_plan(const Shape& in, const Shape& out) {
  ReducePlan p;
  std::int64_t aligned[Shape::kMaxDims] = {};
  const int nd = in.size();
  bool ok = out.size() <= nd;
  for (int o = 0; ok && o < out.size(); ++o) {
    const std::int64_t so = out[o], si = in[nd - out.size() + o];
    ok = so == si || so == 1;
  }
  if (!ok) throw ValueError("reduce_plan: cannot reduce " + in.str() + " to " + out.str());
  for (int d = 0; d < nd; ++d) {
    const int o = d - (nd - out.size());
    aligned[d] = o < 0 ? 1 : out[o];
  }
  const auto cs = contiguous_strides(in);
  p.out_count = out.numel();
  p.reduced_count = 1;
  for (int d = 0; d < nd; ++d) {
    StridedIter& it = aligned[d] == in[d] ? p.kept : p.reduced;
    if (aligned[d] != in[d]) p.reduced_count *= in[d];
    it.sizes[it.nd] = in[d];
    it.strides[0][it.nd] = cs[static_cast<std::size_t>(d)];
    ++it.nd;
  }
  if (p.out_count > 0) coalesce(p.kept);
  if (p.reduced_count > 0)
    coalesce(p.reduced);
  else
    p.reduced = StridedIter{};
  return p;
}

StridedIter slice_iter(const Shape& full, int d, std::int64_t start, std::int64_t len,
                       std::int64_t* full_base) {
  Shape slice = full;
  slice[d] = len;
  const auto fs = contiguous_strides(full), ss = contiguous_strides(slice);
  StridedIter it;
  it.nd = full.size();
  for (int i = 0; i < it.nd; ++i) {
    it.sizes[i] = slice[i];
    it.strides[0][i] = ss[static_cast<std::size_t>(i)];
    it.strides[1][i] = fs[static_cast<std::size_t>(i)];
  }
  *full_base = start * fs[static_cast<std::size_t>(d)];
  if (slice.numel() > 0) coalesce(it);
  return it;
}

StridedIter transpose_iter(std::int64_t rows, std::int64_t cols) {
  StridedIter it;
  it.nd = 2;
  it.sizes[0] = cols;
  it.sizes[1] = rows;
  it.strides[0][0] = rows;  // output [cols, rows], contiguous
  it.strides[0][1] = 1;
  it.strides[1][0] = 1;  // input [rows, cols]: output (j, i) reads input (i, j)
  it.strides[1][1] = cols;
  if (rows * cols > 0) coalesce(it);
  return it;
}

StridedIter permute_iter(const Shape& in, const std::vector<int>& dims) {
  const auto cs = contiguous_strides(in);
  Shape out;
  for (int d : dims) out.push_back(in[d]);
  const auto os = contiguous_strides(out);
  StridedIter it;
  it.nd = out.size();
  for (int i = 0; i < it.nd; ++i) {
    it.sizes[i] = out[i];
    it.strides[0][i] = os[static_cast<std::size_t>(i)];
    it.strides[1][i] = cs[static_cast<std::size_t>(dims[static_cast<std::size_t>(i)])];
  }
  if (out.numel() > 0) coalesce(it);
  return it;
}

}  // namespace lockstep::detail
