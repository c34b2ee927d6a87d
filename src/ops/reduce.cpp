// Reductions (sum, mean, max, argmax) and softmax along a dimension. A tensor reduced along `dim`
// is viewed as [outer, R, inner]; float sums accumulate in double.
#include <cmath>
#include <limits>

#include "ops/wrapping.h"
#include "ops/cuda_ops.h"
#include "ops/kernels.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;

namespace {

Shape reduced_shape(const Shape& s, int d, bool keepdim) {
  Shape out;
  for (int i = 0; i < s.size(); ++i) {
    if (i != d)
      out.push_back(s[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;

template <class F>
decltype(auto) visit_all(DType t, F&& f) {
  if (t == DType::Float64) return f(double{});
  if (t == DType::Int64) return f(std::int64_t{});
  return f(float{});
}

// `shape` with dimension d set to 1 (the keepdim shape of a reduction along d).
Shape keep_shape(const Shape& s, int d) {
  Shape out = s;
  out[d] = 1;
  return out;
}

// g (shape with `dim` reduced, any keepdim) expanded back along `dim` to `shape`, times `scale`.
Tensor expand_along(const Tensor& g, const Shape& shape, int d, double scale) {
  detail::DimSplit k = detail::split_at_dim(shape, d);
  Tensor out = empty(shape, g.options());
  if (g.device().is_cuda()) {
    // g viewed with size 1 at d, broadcast along d and times T(scale): the CPU's g · T(scale).
    cuda_ops::binary_broadcast(kernels::BinaryOp::Mul,
                               detail::alias(g, g.impl().offset, keep_shape(shape, d)),
                               scalar_tensor(scale, g.options()), out);
    return out;
  }
  detail::visit_float(g.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pg = g.data_ptr<T>();
    T* po = out.data_ptr<T>();
    T sc = static_cast<T>(scale);
    for (std::int64_t o = 0; o < k.outer; ++o)
      for (std::int64_t r = 0; r < k.r; ++r)
        for (std::int64_t i = 0; i < k.inner; ++i)
          po[(o * k.r + r) * k.inner + i] = pg[o * k.inner + i] * sc;
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& a) {
  detail::check_defined("sum", a);
  Tensor out = empty(Shape{}, a.options());
  std::int64_t n = a.numel();
  if (a.device().is_cuda()) {
    if (is_floating(a.dtype()))
      cuda_ops::sum_all(a, 1.0, out);
    else
      cuda_ops::sum_to(a, out);  // int64: one thread, in index order
  } else
    visit_all(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      Acc<T> acc = 0;
      const T* p = a.data_ptr<T>();
      for (std::int64_t i = 0; i < n; ++i) acc = detail::wrapping_add<Acc<T>>(acc, p[i]);
      *out.data_ptr<T>() = static_cast<T>(acc);
    });
  if (needs_grad({&a}))
    record("SumBackward", out, {&a}, [s = a.shape()](const Tensor& g) {
      return std::vector<Tensor>{full(s, g.item(), g.options())};
    });
  return out;
}

Tensor sum(const Tensor& a, int dim, bool keepdim) {
  detail::check_defined("sum", a);
  int d = detail::wrap_dim("sum", dim, a.dim());
  detail::DimSplit k = detail::split_at_dim(a.shape(), d);
  Tensor out = empty(reduced_shape(a.shape(), d, keepdim), a.options());
  if (a.device().is_cuda())
    cuda_ops::sum_to(a, detail::alias(out, out.impl().offset, keep_shape(a.shape(), d)));
  else
    visit_all(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* p = a.data_ptr<T>();
      T* po = out.data_ptr<T>();
      std::vector<Acc<T>> acc(static_cast<std::size_t>(k.inner));
      for (std::int64_t o = 0; o < k.outer; ++o) {
        std::fill(acc.begin(), acc.end(), Acc<T>(0));
        for (std::int64_t r = 0; r < k.r; ++r)
          for (std::int64_t i = 0; i < k.inner; ++i) 
            acc[i] = detail::wrapping_add<Acc<T>>(acc[i], p[(o * k.r + r) * k.inner + i]);
        for (std::int64_t i = 0; i < k.inner; ++i) po[o * k.inner + i] = static_cast<T>(acc[i]);
      }
    });
  if (needs_grad({&a}))
    record("SumBackward", out, {&a}, [s = a.shape(), d](const Tensor& g) {
      return std::vector<Tensor>{expand_along(g, s, d, 1.0)};
    });
  return out;
}

Tensor mean(const Tensor& a) {
  detail::check_floating("mean", a);
  std::int64_t n = a.numel();
  Tensor out = empty(Shape{}, a.options());
  if (a.device().is_cuda())
    cuda_ops::sum_all(a, static_cast<double>(n), out);  // NaN when n == 0
  else
    detail::visit_float(a.dtype(), [&](auto zero) {
      using T = decltype(zero);
      double acc = 0;
      const T* p = a.data_ptr<T>();
      for (std::int64_t i = 0; i < n; ++i) acc += p[i];
      *out.data_ptr<T>() = static_cast<T>(acc / static_cast<double>(n));  // NaN when n == 0
    });
  if (needs_grad({&a}))
    record("MeanBackward", out, {&a}, [s = a.shape(), n](const Tensor& g) {
      return std::vector<Tensor>{full(s, g.item() / static_cast<double>(n), g.options())};
    });
  return out;
}

Tensor mean(const Tensor& a, int dim, bool keepdim) {
  detail::check_floating("mean", a);
  int d = detail::wrap_dim("mean", dim, a.dim());
  std::int64_t r = a.size(d);
  Tensor s;
  {
    NoGradGuard g;
    s = mul(sum(a, d, keepdim), 1.0 / static_cast<double>(r));
  }
  if (needs_grad({&a}))
    record("MeanBackward", s, {&a}, [sh = a.shape(), d, r](const Tensor& g) {
      return std::vector<Tensor>{expand_along(g, sh, d, 1.0 / static_cast<double>(r))};
    });
  return s;
}

Tensor max(const Tensor& a) {
  detail::check_defined("max", a);
  if (a.numel() == 0) throw ShapeError("max: cannot reduce an empty tensor " + a.shape().str());
  Tensor out = empty(Shape{}, a.options());
  if (a.device().is_cuda()) {
    cuda_ops::max_all(a, false, out, empty(Shape{}, TensorOptions(kInt64).device(a.device())));
    if (needs_grad({&a}))
      record("MaxBackward", out, {&a}, [a = a.detach(), best = out.detach()](const Tensor& g) {
        Tensor ga = empty(a.shape(), a.options());
        cuda_ops::max_all_backward(a, best, g, ga);
        return std::vector<Tensor>{ga};
      });
    return out;
  }
  double best = 0;
  visit_all(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = a.data_ptr<T>();
    T m = p[0];
    for (std::int64_t i = 1; i < a.numel(); ++i)
      if (p[i] > m || (std::is_floating_point_v<T> && std::isnan(static_cast<double>(p[i]))))
        m = p[i];
    *out.data_ptr<T>() = m;
    best = static_cast<double>(m);
  });
  if (needs_grad({&a}))
    record("MaxBackward", out, {&a}, [a = a.detach(), best](const Tensor& g) {
      // evenly distributed among tied maxima, as PyTorch's full-reduction max backward
      auto v = a.to_vector<double>();
      std::int64_t ties = 0;
      for (double x : v) ties += x == best;
      Tensor ga = zeros(a.shape(), a.options());
      double share = g.item() / static_cast<double>(std::max<std::int64_t>(ties, 1));
      detail::visit_float(a.dtype(), [&](auto zero) {
        using T = decltype(zero);
        T* pg = ga.data_ptr<T>();
        for (std::size_t i = 0; i < v.size(); ++i)
          if (v[i] == best) pg[i] = static_cast<T>(share);
      });
      return std::vector<Tensor>{ga};
    });
  return out;
}

std::pair<Tensor, Tensor> max(const Tensor& a, int dim, bool keepdim) {
  detail::check_defined("max", a);
  int d = detail::wrap_dim("max", dim, a.dim());
  if (a.size(d) == 0)
    throw ShapeError("max: cannot reduce over an empty dimension " + std::to_string(dim) + " of " +
                     a.shape().str());
  detail::DimSplit k = detail::split_at_dim(a.shape(), d);
  Shape rs = reduced_shape(a.shape(), d, keepdim);
  Tensor values = empty(rs, a.options()),
         indices = empty(rs, TensorOptions(kInt64).device(a.device()));
  if (a.device().is_cuda()) {
    cuda_ops::max_dim(a, d, values, indices);
    if (needs_grad({&a}))
      record("MaxDimBackward", values, {&a}, [s = a.shape(), d, indices](const Tensor& g) {
        Tensor ga = zeros(s, g.options());
        cuda_ops::max_dim_backward(g, indices, d, ga);
        return std::vector<Tensor>{ga};
      });
    return {values, indices};
  }
  visit_all(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = a.data_ptr<T>();
    T* pv = values.data_ptr<T>();
    auto* pi = indices.data_ptr<std::int64_t>();
    for (std::int64_t o = 0; o < k.outer; ++o)
      for (std::int64_t i = 0; i < k.inner; ++i) {
        std::int64_t best = 0;
        T m = p[o * k.r * k.inner + i];
        for (std::int64_t r = 1; r < k.r; ++r) {
          T v = p[(o * k.r + r) * k.inner + i];
          // NaN propagates with its first index, as torch.max(x, dim) (and torch.argmax).
          if (v > m || (std::is_floating_point_v<T> && std::isnan(static_cast<double>(v)) &&
                        !std::isnan(static_cast<double>(m)))) {
            m = v;
            best = r;
          }
        }
        pv[o * k.inner + i] = m;
        pi[o * k.inner + i] = best;
      }
  });
  if (needs_grad({&a}))
    record("MaxDimBackward", values, {&a}, [s = a.shape(), d, indices](const Tensor& g) {
      detail::DimSplit k = detail::split_at_dim(s, d);
      Tensor ga = zeros(s, g.options());
      const auto* pi = indices.data_ptr<std::int64_t>();
      detail::visit_float(g.dtype(), [&](auto zero) {
        using T = decltype(zero);
        const T* pg = g.data_ptr<T>();
        T* po = ga.data_ptr<T>();
        for (std::int64_t o = 0; o < k.outer; ++o)
          for (std::int64_t i = 0; i < k.inner; ++i)
            po[(o * k.r + pi[o * k.inner + i]) * k.inner + i] = pg[o * k.inner + i];
      });
      return std::vector<Tensor>{ga};
    });
  return {values, indices};
}

Tensor argmax(const Tensor& a, int dim, bool keepdim) {
  detail::check_defined("argmax", a);
  NoGradGuard g;
  return max(a, dim, keepdim).second;
}

Tensor argmax(const Tensor& a) {
  detail::check_defined("argmax", a);
  if (a.numel() == 0) throw ShapeError("argmax: cannot reduce an empty tensor");
  if (a.device().is_cuda()) {
    // One block instead of max along dim 0 of the flattened tensor (one thread): the same rule.
    Tensor out = empty(Shape{}, TensorOptions(kInt64).device(a.device()));
    cuda_ops::max_all(a, true, Tensor(), out);
    return out;
  }
  NoGradGuard g;
  return reshape(max(reshape(a, {a.numel()}), 0).second, Shape{});
}

namespace {
// log_softmax (log = true) or softmax along d.
Tensor softmax_impl(const Tensor& x, int d, bool log) {
  detail::DimSplit k = detail::split_at_dim(x.shape(), d);
  Tensor out = empty(x.shape(), x.options());
  if (x.device().is_cuda()) {
    cuda_ops::softmax(x, d, log, out);  // the same line loop (src/ops/device_ops.h)
    return out;
  }
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = x.data_ptr<T>();
    T* po = out.data_ptr<T>();
    for (std::int64_t o = 0; o < k.outer; ++o)
      for (std::int64_t i = 0; i < k.inner; ++i) {
        auto at = [&](std::int64_t r) { return (o * k.r + r) * k.inner + i; };
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t r = 0; r < k.r; ++r) mx = std::max(mx, static_cast<double>(p[at(r)]));
        double s = 0;
        for (std::int64_t r = 0; r < k.r; ++r) s += std::exp(p[at(r)] - mx);
        double lse = mx + std::log(s);
        for (std::int64_t r = 0; r < k.r; ++r)
          po[at(r)] = static_cast<T>(log ? p[at(r)] - lse : std::exp(p[at(r)] - lse));
      }
  });
  return out;
}
}  // namespace

Tensor log_softmax(const Tensor& x, int dim) {
  detail::check_floating("log_softmax", x);
  int d = detail::wrap_dim("log_softmax", dim, x.dim());
  Tensor out = softmax_impl(x, d, true);
  if (needs_grad({&x}))
    record("LogSoftmaxBackward", out, {&x}, [out = out.detach(), d](const Tensor& g) {
      // dx = g - softmax * sum(g)
      Tensor sg = sum(g, d, true);
      return std::vector<Tensor>{sub(g, mul(exp(out), sg))};
    });
  return out;
}

Tensor softmax(const Tensor& x, int dim) {
  detail::check_floating("softmax", x);
  int d = detail::wrap_dim("softmax", dim, x.dim());
  Tensor out = softmax_impl(x, d, false);
  if (needs_grad({&x}))
    record("SoftmaxBackward", out, {&x}, [out = out.detach(), d](const Tensor& g) {
      // dx = y * (g - sum(g * y))
      Tensor gy = mul(g, out);
      return std::vector<Tensor>{sub(gy, mul(out, sum(gy, d, true)))};
    });
  return out;
}

}  // namespace lockstep
