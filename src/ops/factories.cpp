// Factory functions that fill or copy: full, zeros, ones, arange, randn, rand, randint, randperm,
// tensor, scalar_tensor. The random ones draw PyTorch's values on an MT19937 generator
// (lockstep/ops/random.h) and Lockstep's own on Philox. Declared in include/lockstep/core/tensor.h; defined here, in the op
// layer, because they fill through fill_ and reach cuda:k devices through to() (core depends on
// no other layer: docs/design.md, "Layers"). empty() is core's (src/core/tensor.cpp).
#include <cmath>
#include <cstring>
#include <mutex>
#include <numbers>
#include <sstream>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/tensor.h"
#include "lockstep/ops/random.h"
#include "ops/torch_random.h"

namespace lockstep {

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  bool rg = opts.requires_grad_;
  Tensor t = Tensor::empty(shape, opts.requires_grad(false));
  {
    NoGradGuard g;
    t.fill_(value);
  }
  if (rg) t.requires_grad_(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }

namespace {
// Factories that draw or count on the host make a cuda:k tensor by building it on the CPU and
// copying it over (one upload): the same values on every device.
template <class F>
Tensor via_host(TensorOptions opts, F make) {
  check_device_available(opts.device_);
  Tensor t = make(opts.device(cpu()).requires_grad(false)).to(opts.device_);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor arange(double start, double end, double step, TensorOptions opts) {
  if (!opts.device_.is_cpu())
    return via_host(opts, [&](TensorOptions o) { return arange(start, end, step, o); });
  // torch: "unsupported range: 0 -> nan" for a start or end that is NaN or infinite (a NaN end
  // gave an empty tensor, an infinite one "negative dimension [-9223372036854775808]").
  auto check_finite = [&](double v, const char* name) {
    if (std::isfinite(v)) return;
    std::ostringstream msg;
    msg << "arange: unsupported range: " << start << " -> " << end << " (" << name << " is " << v
        << ")";
    throw ValueError(msg.str());
  };
  check_finite(start, "start");
  check_finite(end, "end");
  if (!std::isfinite(step)) {
    std::ostringstream msg;
    msg << "arange: step must be finite, got " << step << " (range " << start << " -> " << end
        << ")";
    throw ValueError(msg.str());
  }
  if (step == 0) throw ValueError("arange: step must be non-zero");
  double n = std::ceil((end - start) / step);
  if (!(n < 9.2e18)) {  // also an infinite quotient
    std::ostringstream msg;
    msg << "arange: the range " << start << " -> " << end << " in steps of " << step
        << " has more elements than a tensor can hold";
    throw ValueError(msg.str());
  }
  std::int64_t count = n > 0 ? static_cast<std::int64_t>(n) : 0;
  Tensor t = Tensor::empty({count}, opts.requires_grad(false));
  for (std::int64_t i = 0; i < count; ++i) {
    double v = start + static_cast<double>(i) * step;
    switch (t.dtype()) {
      case DType::Float32:
        t.data_ptr<float>()[i] = static_cast<float>(v);
        break;
      case DType::Float64:
        t.data_ptr<double>()[i] = v;
        break;
      case DType::Int64:
        t.data_ptr<std::int64_t>()[i] = static_cast<std::int64_t>(v);
        break;
    }
  }
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor arange(std::int64_t end, TensorOptions opts) {
  return arange(0.0, static_cast<double>(end), 1.0, opts);
}

namespace {
bool is_mt19937(Generator* gen) {
  return (gen ? *gen : default_generator()).engine() == Generator::Engine::MT19937;
}

// A new tensor filled by the in-place sampler `draw` (lockstep/ops/random.h), as PyTorch's
// factories are empty + the sampler: torch.randn is normal_, rand uniform_, randint random_.
template <class F>
Tensor sampled_factory(const Shape& shape, TensorOptions opts, const char* what, bool float_only,
                     F draw) {
  if (float_only && !is_floating(opts.dtype_))
    throw DTypeError(std::string(what) + ": expected a float dtype, got " + to_string(opts.dtype_));
  Tensor t = Tensor::empty(shape, opts.requires_grad(false));
  draw(t);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

template <class F>
Tensor fill_random(const Shape& shape, TensorOptions opts, Generator* gen, const char* what, F f) {
  if (!is_floating(opts.dtype_))
    throw DTypeError(std::string(what) + ": expected a float dtype, got " + to_string(opts.dtype_));
  Tensor t = Tensor::empty(shape, opts.requires_grad(false));
  Generator& g = gen ? *gen : default_generator();
  std::unique_lock<std::mutex> lock(g.mutex(), std::defer_lock);
  if (!gen) lock.lock();
  std::int64_t n = t.numel();
  if (t.dtype() == DType::Float32) {
    auto* p = t.data_ptr<float>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(f(g, true));
  } else {
    auto* p = t.data_ptr<double>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = f(g, false);
  }
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  if (!opts.device_.is_cpu())
    return via_host(opts, [&](TensorOptions o) { return randn(shape, o, gen); });
  if (is_mt19937(gen))
    return sampled_factory(shape, opts, "randn", true,
                           [&](Tensor& t) { normal_(t, 0.0, 1.0, gen); });
  // Box-Muller: one normal per pair of uniforms (the sine half is discarded so that element i
  // depends only on the stream position, not on the tensor's size).
  return fill_random(shape, opts, gen, "randn", [](Generator& g, bool) {
    double u1 = 1.0 - g.next_double();  // (0, 1]
    double u2 = g.next_double();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  });
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  if (!opts.device_.is_cpu())
    return via_host(opts, [&](TensorOptions o) { return rand(shape, o, gen); });
  if (is_mt19937(gen))
    return sampled_factory(shape, opts, "rand", true,
                           [&](Tensor& t) { uniform_(t, 0.0, 1.0, gen); });
  return fill_random(shape, opts, gen, "rand", [](Generator& g, bool single) {
    return single ? static_cast<double>(g.next_float()) : g.next_double();
  });
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, TensorOptions opts,
               Generator* gen) {
  if (!opts.device_.is_cpu())
    return via_host(opts, [&](TensorOptions o) { return randint(low, high, shape, o, gen); });
  if (high <= low)
    throw ValueError("randint: high (" + std::to_string(high) + ") must be greater than low (" +
                     std::to_string(low) + ")");
  // torch.randint is empty + random_(low, high): PyTorch's on MT19937, low + a rejection-sampled
  // integer below high − low on Philox.
  return sampled_factory(shape, opts.requires_grad(false), "randint", false,
                       [&](Tensor& t) { random_(t, low, high, gen); });
}

Tensor randperm(std::int64_t n, Generator* gen) {
  if (n < 0) throw ValueError("randperm: n must be non-negative, got " + std::to_string(n));
  Tensor t = arange(n);
  Generator& g = gen ? *gen : default_generator();
  std::unique_lock<std::mutex> lock(g.mutex(), std::defer_lock);
  if (!gen) lock.lock();
  auto* p = t.data_ptr<std::int64_t>();
  if (g.engine() == Generator::Engine::MT19937) {
    torch_random::randperm(p, n, g);
    return t;
  }
  for (std::int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<std::int64_t>(g.next_below(static_cast<std::uint64_t>(i + 1)));
    std::swap(p[i], p[j]);
  }
  return t;
}

namespace {
template <class T>
Tensor from_values(std::span<const T> values, const Shape& shape, TensorOptions opts) {
  Shape s = shape.size() == 0 ? Shape{static_cast<std::int64_t>(values.size())} : shape;
  if (s.numel() != static_cast<std::int64_t>(values.size()))
    throw ShapeError("tensor(): " + std::to_string(values.size()) + " values do not fill shape " +
                     s.str());
  Tensor src = Tensor::empty(s, TensorOptions(dtype_of<T>::value));
  if (!values.empty()) std::memcpy(src.raw_data(), values.data(), values.size() * sizeof(T));
  Tensor out = src.to(opts.dtype_).to(opts.device_);
  if (opts.requires_grad_) out.requires_grad_(true);
  return out;
}
}  // namespace

Tensor tensor(std::span<const float> v, const Shape& s, TensorOptions o) {
  return from_values(v, s, o);
}
Tensor tensor(std::span<const double> v, const Shape& s, TensorOptions o) {
  return from_values(v, s, o);
}
Tensor tensor(std::span<const std::int64_t> v, const Shape& s, TensorOptions o) {
  return from_values(v, s, o);
}

Tensor scalar_tensor(double value, TensorOptions opts) { return full(Shape{}, value, opts); }
}  // namespace lockstep
