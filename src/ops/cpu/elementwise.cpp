// Fast elementwise kernels: contiguous loops the compiler vectorises for the shapes training
// produces (same shape, scalar operand, a trailing-dimension row such as a bias). Anything else
// falls back to the reference broadcasting kernel.
#include "ops/wrapping.h"
#include "ops/kernels.h"

namespace lockstep::kernels::cpu {

namespace {

template <class T, class F>
void run(const T* a, std::int64_t sa, const T* b, std::int64_t sb, T* o, std::int64_t n, F f) {
  if (sa && sb) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sa) {
    T y = b[0];
    for (std::int64_t i = 0; i < n; ++i) o[i] = f(a[i], y);
  } else if (sb) {
    T x = a[0];
    for (std::int64_t i = 0; i < n; ++i) o[i] = f(x, b[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) o[i] = f(a[0], b[0]);
  }
}

template <class T>
void dispatch_op(BinaryOp op, const T* a, std::int64_t sa, const T* b, std::int64_t sb, T* o,
                 std::int64_t n) {
  switch (op) {
    case BinaryOp::Add:
      return run(a, sa, b, sb, o, n, [](T x, T y) { return ::lockstep::detail::wrapping_add(x, y); });
    case BinaryOp::Sub:
      return run(a, sa, b, sb, o, n, [](T x, T y) { return ::lockstep::detail::wrapping_sub(x, y); });
    case BinaryOp::Mul:
      return run(a, sa, b, sb, o, n, [](T x, T y) { return ::lockstep::detail::wrapping_mul(x, y); });
    case BinaryOp::Div:
      return run(a, sa, b, sb, o, n, [](T x, T y) { return x / y; });
  }
}

// True when `s` without its leading 1s equals the trailing dims of `full` (e.g. a bias [N] or
// [1, N] against [B, N]): then `s` repeats every s.numel() elements of `full`.
bool is_trailing_row(const Shape& s, const Shape& full) {
  int lead = 0;
  while (lead < s.size() && s[lead] == 1) ++lead;
  int rest = s.size() - lead;
  if (rest > full.size()) return false;
  for (int i = 0; i < rest; ++i)
    if (s[lead + i] != full[full.size() - rest + i]) return false;
  return true;
}

template <class T>
void binary_t(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const T* pa = a.data_ptr<T>();
  const T* pb = b.data_ptr<T>();
  T* po = out.data_ptr<T>();
  std::int64_t n = out.numel(), na = a.numel(), nb = b.numel();
  if (n == 0) return;
  if ((na == n || na == 1) && (nb == n || nb == 1)) {
    return dispatch_op<T>(op, pa, na == n && n != 1, pb, nb == n && n != 1, po, n);
  }
  if (na == n && is_trailing_row(b.shape(), out.shape())) {
    for (std::int64_t r = 0; r < n; r += nb) dispatch_op<T>(op, pa + r, 1, pb, 1, po + r, nb);
    return;
  }
  if (nb == n && is_trailing_row(a.shape(), out.shape())) {
    for (std::int64_t r = 0; r < n; r += na) dispatch_op<T>(op, pa, 1, pb + r, 1, po + r, na);
    return;
  }
  ref::binary(op, a, b, out);
}

template <class T>
void sum_to_t(const Tensor& in, Tensor& out) {
  std::int64_t n = in.numel(), m = out.numel();
  const T* pi = in.data_ptr<T>();
  T* po = out.data_ptr<T>();
  if (m == n) {
    for (std::int64_t i = 0; i < n; ++i) po[i] = pi[i];
    return;
  }
  if (m == 1) {
    double acc = 0;
    for (std::int64_t i = 0; i < n; ++i) acc += static_cast<double>(pi[i]);
    po[0] = static_cast<T>(acc);
    return;
  }
  if (is_trailing_row(out.shape(), in.shape())) {  // e.g. bias gradient: [B, N] -> [N]
    // Each column summed over the rows in order, in double. Narrow rows (the reference model's
    // 5 and 2 columns) go column by column with the sum in a register; wide ones row by row
    // over a double row buffer, which reads `in` contiguously. Same order, same bits.
    if (m <= 16) {
      for (std::int64_t j = 0; j < m; ++j) {
        double acc = 0.0;
        for (std::int64_t r = j; r < n; r += m) acc += static_cast<double>(pi[r]);
        po[j] = static_cast<T>(acc);
      }
      return;
    }
    double stack[256];
    std::vector<double> heap;
    double* acc = stack;
    if (m > 256) {
      heap.resize(static_cast<std::size_t>(m));
      acc = heap.data();
    }
    for (std::int64_t j = 0; j < m; ++j) acc[j] = 0.0;
    for (std::int64_t r = 0; r < n; r += m)
      for (std::int64_t j = 0; j < m; ++j) acc[j] += static_cast<double>(pi[r + j]);
    for (std::int64_t j = 0; j < m; ++j) po[j] = static_cast<T>(acc[j]);
    return;
  }
  ref::sum_to(in, out);
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

}  // namespace lockstep::kernels::cpu
