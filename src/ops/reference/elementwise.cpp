// Reference broadcasting kernels: every output element's input positions are computed from its
// multi-index. Slow and obviously right; the oracle for the fast paths in cpu/elementwise.cpp.
#include <array>

#include "ops/wrapping.h"
#include "ops/kernels.h"

namespace lockstep::kernels::ref {

namespace {

// Element strides of `t` aligned to the last `nd` dimensions of a broadcast shape; 0 where `t`
// has size 1 (or is missing) so the same element is reused.
std::array<std::int64_t, Shape::kMaxDims> broadcast_strides(const Shape& s, int nd) {
  std::array<std::int64_t, Shape::kMaxDims> st{};
  std::int64_t stride = 1;
  for (int i = s.size() - 1, o = nd - 1; i >= 0; --i, --o) {
    st[o] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
}

template <class T>
T apply(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::Add:
      return ::lockstep::detail::wrapping_add(x, y);  // int64 wraps, as PyTorch
    case BinaryOp::Sub:
      return ::lockstep::detail::wrapping_sub(x, y);
    case BinaryOp::Mul:
      return ::lockstep::detail::wrapping_mul(x, y);
    case BinaryOp::Div:
      return x / y;
  }
  return x;
}

template <class T>
void binary_t(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const Shape& os = out.shape();
  int nd = os.size();
  auto sa = broadcast_strides(a.shape(), nd), sb = broadcast_strides(b.shape(), nd);
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* po = out.data_ptr<T>();
  std::int64_t n = out.numel();
  std::array<std::int64_t, Shape::kMaxDims> idx{};
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t ia = 0, ib = 0;
    for (int d = 0; d < nd; ++d) {
      ia += idx[d] * sa[d];
      ib += idx[d] * sb[d];
    }
    po[i] = apply(op, pa[ia], pb[ib]);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
}

template <class T>
void sum_to_t(const Tensor& in, Tensor& out) {
  const Shape& is = in.shape();
  int nd = is.size();
  auto so = broadcast_strides(out.shape(), nd);
  std::int64_t n_out = out.numel();
  std::vector<double> acc(static_cast<std::size_t>(n_out), 0.0);
  const T* pi = in.data_ptr<T>();
  std::array<std::int64_t, Shape::kMaxDims> idx{};
  std::int64_t n = in.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t io = 0;
    for (int d = 0; d < nd; ++d) io += idx[d] * so[d];
    acc[io] += static_cast<double>(pi[i]);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < is[d]) break;
      idx[d] = 0;
    }
  }
  T* po = out.data_ptr<T>();
  for (std::int64_t i = 0; i < n_out; ++i) po[i] = static_cast<T>(acc[i]);
}

}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (out.dtype()) {
    case DType::Float32:
      return binary_t<float>(op, a, b, out);
    case DType::Float64:
      return binary_t<double>(op, a, b, out);
    case DType::Int64:
      return binary_t<std::int64_t>(op, a, b, out);
  }
}

void sum_to(const Tensor& in, Tensor& out) {
  switch (out.dtype()) {
    case DType::Float32:
      return sum_to_t<float>(in, out);
    case DType::Float64:
      return sum_to_t<double>(in, out);
    case DType::Int64:
      return sum_to_t<std::int64_t>(in, out);
  }
}

}  // namespace lockstep::kernels::ref
