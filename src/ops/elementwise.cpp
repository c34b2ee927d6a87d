// Elementwise ops with broadcasting and their backward formulas.
#include <algorithm>
#include <cmath>

#include "ops/wrapping.h"
#include "lockstep/core/parallel.h"
#include "ops/cuda_ops.h"
#include "ops/kernels.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/strided_plan.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;
using kernels::BinaryOp;

namespace detail {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  int nd = std::max(a.size(), b.size());
  Shape out;
  for (int i = 0; i < nd; ++i) {
    int ia = a.size() - nd + i, ib = b.size() - nd + i;
    std::int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes " + a.str() + " and " + b.str() +
                       " cannot be broadcast together");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor out = empty(shape, g.options());
  if (!g.device().is_cpu()) {
    // None when only size-1 dimensions differ (the same elements in the same order: a copy);
    // to one element the one-block sum; otherwise one thread per output element summing its
    // positions in increasing input index in double, as the CPU's kernels (the same bits).
    if (out.numel() == g.numel())
      out.copy_(reshape(g, shape));
    else if (out.numel() == 1 && is_floating(g.dtype()))
      cuda_ops::sum_all(g, 1.0, out);
    else
      cuda_ops::sum_to(g, out);
    return out;
  }
  kernels::dispatch::sum_to(g, out);
  return out;
}

}  // namespace detail

namespace {

Tensor binary_forward(const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  detail::check_same(name, a, b);
  Shape s = detail::broadcast_shapes(name, a.shape(), b.shape());
  Tensor out = empty(s, a.options());
  if (!a.device().is_cpu()) {
    // Each operand with the result's element count (identical shapes up to size-1 dimensions:
    // the same element order) or one element (a tensor op a scalar): the flat kernel; any other
    // broadcasting, and int64, the strided one (strided_plan.h).
    const std::int64_t n = out.numel();
    auto fits = [n](const Tensor& t) { return t.numel() == n || t.numel() == 1; };
    if (is_floating(a.dtype()) && fits(a) && fits(b))
      cuda_ops::binary(op, a, b, out);
    else
      cuda_ops::binary_broadcast(op, a, b, out);
    return out;
  }
  kernels::dispatch::binary(op, a, b, out);
  return out;
}

// f(lo, hi) over [0, n) in contiguous ranges, one per thread of the calling thread's team when
// n is large enough to pay for the hand-off (map1/map2's functions are transcendental: erf, exp,
// tanh). Each element is computed alone, so the bits do not depend on the thread count.
constexpr std::int64_t kMapParallelElements = std::int64_t{1} << 14;
template <class F>
void for_ranges(std::int64_t n, const F& f) {
  const std::int64_t parts = std::min<std::int64_t>(get_num_threads(), n / kMapParallelElements);
  if (parts <= 1) {
    if (n > 0) f(std::int64_t{0}, n);
    return;
  }
  parallel_run(static_cast<int>(parts), [&](int i) { f(n * i / parts, n * (i + 1) / parts); });
}

// out[i] = f(x[i]) for float tensors on the CPU.
template <class F>
Tensor map1(const char* name, const Tensor& x, F f) {
  detail::check_floating(name, x);
  detail::require_cpu(name, x);
  Tensor out = empty(x.shape(), x.options());
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data_ptr<T>();
    T* po = out.data_ptr<T>();
    for_ranges(x.numel(), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) po[i] = f(px[i]);
    });
  });
  return out;
}

// out[i] = f(x[i], y[i]) for same-shape float tensors on the CPU (backward helpers).
template <class F>
Tensor map2(const Tensor& x, const Tensor& y, F f) {
  Tensor out = empty(x.shape(), x.options());
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data_ptr<T>();
    const T* py = y.data_ptr<T>();
    T* po = out.data_ptr<T>();
    for_ranges(x.numel(), [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) po[i] = f(px[i], py[i]);
    });
  });
  return out;
}

// out = f over the contiguous float32 CPU tensors x and y (same shape), range by range as map2:
// f(x, y, out, n) is a loop of src/ops/cpu/ (each element alone, so the same bits for any split).
template <class F>
Tensor map_f32(const Tensor& x, const Tensor& y, F f) {
  Tensor out = empty(x.shape(), x.options());
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for_ranges(x.numel(), [&](std::int64_t lo, std::int64_t hi) {
    f(px + lo, py + lo, po + lo, hi - lo);
  });
  return out;
}

// f(x) elementwise: on a GPU the kernel of `op` (param: pow's exponent), whose formula is f's
// (src/ops/device_ops.h); on the CPU map1.
template <class F>
Tensor unary(const char* name, cuda_ops::MathOp op, double param, const Tensor& x, F f) {
  if (x.defined() && x.device().is_cuda()) {
    detail::check_floating(name, x);
    Tensor out = empty(x.shape(), x.options());
    cuda_ops::math(op, x, out, param);
    return out;
  }
  return map1(name, x, f);
}

// The backward of `unary`: f(g, saved) elementwise, saved the forward's result or input.
template <class F>
Tensor unary_backward(cuda_ops::MathOp op, double param, const Tensor& g, const Tensor& saved,
                      F f) {
  if (saved.device().is_cuda()) {
    Tensor gi = empty(saved.shape(), saved.options());
    cuda_ops::math_backward(op, g, saved, gi, param);
    return gi;
  }
  return map2(g, saved, f);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("add", BinaryOp::Add, a, b);
  if (needs_grad({&a, &b}))
    record("AddBackward", out, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return std::vector<Tensor>{detail::sum_to(g, sa), detail::sum_to(g, sb)};
    });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("sub", BinaryOp::Sub, a, b);
  if (needs_grad({&a, &b}))
    record("SubBackward", out, {&a, &b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return std::vector<Tensor>{detail::sum_to(g, sa), neg(detail::sum_to(g, sb))};
    });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("mul", BinaryOp::Mul, a, b);
  if (needs_grad({&a, &b}))
    record("MulBackward", out, {&a, &b},
           [a = a.detach(), b = b.detach(), ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) {
             return std::vector<Tensor>{ra ? detail::sum_to(mul(g, b), a.shape()) : Tensor(),
                                        rb ? detail::sum_to(mul(g, a), b.shape()) : Tensor()};
           });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  detail::check_floating("div", a);
  Tensor out = binary_forward("div", BinaryOp::Div, a, b);
  if (needs_grad({&a, &b}))
    record("DivBackward", out, {&a, &b},
           [a = a.detach(), b = b.detach(), ra = a.requires_grad(),
            rb = b.requires_grad()](const Tensor& g) {
             Tensor ga, gb;
             if (ra) ga = detail::sum_to(div(g, b), a.shape());
             if (rb) gb = detail::sum_to(neg(div(mul(g, a), mul(b, b))), b.shape());
             return std::vector<Tensor>{ga, gb};
           });
  return out;
}

namespace {

// An integer tensor with a scalar that no int64 holds: PyTorch's result_type is the default float
// dtype (float32), never a truncated scalar (and a double outside int64's range may not even be
// converted to it in C++).
bool promotes_to_float(const Tensor& a, double s) {
  return a.dtype() == kInt64 && !detail::is_int64_value(s);
}

}  // namespace

Tensor add(const Tensor& a, double s) {
  detail::check_defined("add", a);
  if (promotes_to_float(a, s)) return add(a.to(kFloat32), s);
  Tensor out = binary_forward("add", BinaryOp::Add, a, scalar_tensor(s, a.options()));
  if (needs_grad({&a}))
    record("AddScalarBackward", out, {&a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor sub(const Tensor& a, double s) {
  detail::check_defined("sub", a);
  if (promotes_to_float(a, s)) return sub(a.to(kFloat32), s);
  Tensor out = binary_forward("sub", BinaryOp::Sub, a, scalar_tensor(s, a.options()));
  if (needs_grad({&a}))
    record("SubScalarBackward", out, {&a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor mul(const Tensor& a, double s) {
  detail::check_defined("mul", a);
  if (promotes_to_float(a, s)) return mul(a.to(kFloat32), s);
  Tensor out = binary_forward("mul", BinaryOp::Mul, a, scalar_tensor(s, a.options()));
  if (needs_grad({&a}))
    record("MulScalarBackward", out, {&a},
           [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; });
  return out;
}

namespace {

// torch.eq/ne/lt/le/gt/ge: `a op b` per element after broadcasting, as int64 0/1 (no gradient),
// compared directly over the broadcast iteration space of strided_plan.h.
Tensor compare(const char* name, kernels::shared::Compare op, const Tensor& a, const Tensor& b) {
  detail::check_same(name, a, b);
  const Shape s = detail::broadcast_shapes(name, a.shape(), b.shape());
  Tensor out = empty(s, TensorOptions(kInt64).device(a.device()));
  if (out.numel() == 0) return out;
  if (a.device().is_cuda()) {
    cuda_ops::compare(op, a, b, out);
    return out;
  }
  const detail::StridedIter it = detail::broadcast_iter(s, a.shape(), b.shape());
  auto loop = [&](const auto* pa, const auto* pb) {
    std::int64_t* po = out.data_ptr<std::int64_t>();
    for (std::int64_t i = 0, n = out.numel(); i < n; ++i) {
      std::int64_t oa = 0, ob = 0;
      kernels::shared::strided_offsets(it, i, oa, ob);
      po[i] = kernels::shared::compare_one(op, pa[oa], pb[ob]);
    }
  };
  switch (a.dtype()) {
    case DType::Float32:
      loop(a.data_ptr<float>(), b.data_ptr<float>());
      break;
    case DType::Float64:
      loop(a.data_ptr<double>(), b.data_ptr<double>());
      break;
    case DType::Int64:
      loop(a.data_ptr<std::int64_t>(), b.data_ptr<std::int64_t>());
      break;
  }
  return out;
}

}  // namespace

using kernels::shared::Compare;
Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", Compare::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", Compare::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", Compare::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", Compare::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", Compare::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", Compare::Ge, a, b); }

Tensor pow(const Tensor& a, double p) {
  Tensor out = unary("pow", cuda_ops::MathOp::Pow, p, a,
                     [p](auto x) { return static_cast<decltype(x)>(std::pow(x, p)); });
  if (needs_grad({&a}))
    record("PowBackward", out, {&a}, [a = a.detach(), p](const Tensor& g) {
      return std::vector<Tensor>{
          unary_backward(cuda_ops::MathOp::Pow, p, g, a, [p](auto gi, auto x) {
            using T = decltype(x);
            return p == 0 ? T(0) : static_cast<T>(gi * p * std::pow(x, p - 1));
          })};
    });
  return out;
}

Tensor neg(const Tensor& a) {
  detail::check_defined("neg", a);
  Tensor out = empty(a.shape(), a.options());
  std::int64_t n = a.numel();
  if (!a.device().is_cpu()) {
    if (is_floating(a.dtype()))
      cuda_ops::neg(a, out);
    else  // int64: 0 − a, wrapping as the CPU's −a
      cuda_ops::binary_broadcast(BinaryOp::Sub, zeros(Shape{}, a.options()), a, out);
  } else {
    auto go = [&](auto* po, const auto* pa) {
      for (std::int64_t i = 0; i < n; ++i) po[i] = detail::wrapping_neg(pa[i]);
    };
    switch (a.dtype()) {
      case DType::Float32:
        go(out.data_ptr<float>(), a.data_ptr<float>());
        break;
      case DType::Float64:
        go(out.data_ptr<double>(), a.data_ptr<double>());
        break;
      case DType::Int64:
        go(out.data_ptr<std::int64_t>(), a.data_ptr<std::int64_t>());
        break;
    }
  }
  if (needs_grad({&a}))
    record("NegBackward", out, {&a}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
  return out;
}

Tensor exp(const Tensor& a) {
  Tensor out = unary("exp", cuda_ops::MathOp::Exp, 0, a, [](auto x) { return std::exp(x); });
  if (needs_grad({&a}))
    record("ExpBackward", out, {&a},
           [out = out.detach()](const Tensor& g) { return std::vector<Tensor>{mul(g, out)}; });
  return out;
}

Tensor log(const Tensor& a) {
  Tensor out = unary("log", cuda_ops::MathOp::Log, 0, a, [](auto x) { return std::log(x); });
  if (needs_grad({&a}))
    record("LogBackward", out, {&a},
           [a = a.detach()](const Tensor& g) { return std::vector<Tensor>{div(g, a)}; });
  return out;
}

Tensor sqrt(const Tensor& a) {
  Tensor out = unary("sqrt", cuda_ops::MathOp::Sqrt, 0, a, [](auto x) { return std::sqrt(x); });
  if (needs_grad({&a}))
    record("SqrtBackward", out, {&a}, [out = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{unary_backward(cuda_ops::MathOp::Sqrt, 0, g, out,
                                                [](auto gi, auto y) { return gi / (y + y); })};
    });
  return out;
}

// The two activations of the reference workload have CUDA paths (kernels::cuda, same formulas).
Tensor relu(const Tensor& a) {
  // As PyTorch: NaN and -0.0 pass through (relu(nan) is nan), and the gradient is
  // threshold_backward's: 0 where the output <= 0, the incoming gradient elsewhere (NaN too).
  Tensor out;
  if (a.defined() && a.device().is_cuda()) {
    detail::check_floating("relu", a);
    out = empty(a.shape(), a.options());
    cuda_ops::relu(a, out);
  } else {
    out = map1("relu", a, [](auto x) { return x < 0 ? decltype(x)(0) : x; });
  }
  if (needs_grad({&a}))
    record("ReluBackward", out, {&a}, [out = out.detach()](const Tensor& g) {
      if (out.device().is_cuda()) {
        Tensor gi = empty(out.shape(), out.options());
        cuda_ops::relu_backward(g, out, gi);
        return std::vector<Tensor>{gi};
      }
      return std::vector<Tensor>{
          map2(g, out, [](auto gi, auto y) { return y <= 0 ? decltype(gi)(0) : gi; })};
    });
  return out;
}

Tensor tanh(const Tensor& a) {
  Tensor out;
  if (a.defined() && a.device().is_cuda()) {
    detail::check_floating("tanh", a);
    out = empty(a.shape(), a.options());
    cuda_ops::tanh(a, out);
  } else {
    out = map1("tanh", a, [](auto x) { return std::tanh(x); });
  }
  if (needs_grad({&a}))
    record("TanhBackward", out, {&a}, [out = out.detach()](const Tensor& g) {
      if (out.device().is_cuda()) {
        Tensor gi = empty(out.shape(), out.options());
        cuda_ops::tanh_backward(g, out, gi);
        return std::vector<Tensor>{gi};
      }
      return std::vector<Tensor>{map2(g, out, [](auto gi, auto y) { return gi * (1 - y * y); })};
    });
  return out;
}

Tensor sigmoid(const Tensor& a) {
  Tensor out = unary("sigmoid", cuda_ops::MathOp::Sigmoid, 0, a, [](auto x) {
    using T = decltype(x);
    return T(1) / (T(1) + std::exp(-x));
  });
  if (needs_grad({&a}))
    record("SigmoidBackward", out, {&a}, [out = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{unary_backward(cuda_ops::MathOp::Sigmoid, 0, g, out,
                                                [](auto gi, auto y) { return gi * y * (1 - y); })};
    });
  return out;
}

Tensor gelu(const Tensor& a) { return gelu(a, "none"); }

Tensor gelu(const Tensor& a, const std::string& approximate) {
  if (approximate != "none" && approximate != "tanh")
    throw ValueError("gelu: approximate must be 'none' or 'tanh', got '" + approximate + "'");
  // The bodies of src/ops/device_ops.h themselves, which the CUDA kernel runs too: x·Φ(x),
  // Φ(x) = (1 + erf(x/√2))/2 (Hendrycks & Gimpel 2016; torch's approximate='none'; float32 in
  // float on float_math.h's Φ and exp, float64 in double with the C library's erf), or
  // PyTorch's tanh expression operation by operation (in double, rounded once). The exact form
  // in float32 on the CPU runs the vectorised loops of src/ops/cpu/gelu.cpp (the same bits).
  const bool tanh = approximate == "tanh";
  const auto op = tanh ? cuda_ops::MathOp::GeluTanh : cuda_ops::MathOp::Gelu;
  const bool vectorised = !tanh && a.defined() && a.device().is_cpu() && a.dtype() == kFloat32;
  Tensor out = vectorised ? map_f32(a, a, [](const float* x, const float*, float* y,
                                            std::int64_t n) { kernels::cpu::gelu_f32(x, y, n); })
                          : unary("gelu", op, 0, a, [tanh](auto x) {
                              return tanh ? kernels::shared::gelu_tanh_fwd(x)
                                          : kernels::shared::gelu_fwd(x);
                            });
  if (needs_grad({&a}))
    record("GeluBackward", out, {&a}, [a = a.detach(), op, tanh, vectorised](const Tensor& g) {
      if (vectorised)
        return std::vector<Tensor>{map_f32(g, a, kernels::cpu::gelu_backward_f32)};
      return std::vector<Tensor>{unary_backward(op, 0, g, a, [tanh](auto gi, auto x) {
        return tanh ? kernels::shared::gelu_tanh_bwd(gi, x) : kernels::shared::gelu_bwd(gi, x);
      })};
    });
  return out;
}

}  // namespace lockstep
