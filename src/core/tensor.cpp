// Tensor handle methods and factory functions.
#include "lockstep/core/tensor.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <ostream>
#include <sstream>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/core/pool.h"
#include "lockstep/ops/ops.h"
#include "core/wrapping.h"
#include "ops/cuda_ops.h"
#include "ops/op_utils.h"

namespace lockstep {

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) {
  for (auto d : shape)
    if (d < 0) throw ValueError("negative dimension in shape " + shape.str());
  auto impl = std::allocate_shared<TensorImpl>(detail::PoolAllocator<TensorImpl>());
  impl->storage = std::allocate_shared<Storage>(
      detail::PoolAllocator<Storage>(),
      static_cast<std::size_t>(shape.numel()) * element_size(opts.dtype_), opts.device_);
  impl->shape = shape;
  impl->dtype = opts.dtype_;
  Tensor t(std::move(impl));
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

std::int64_t Tensor::size_wrapped(int d) const {
  return shape()[detail::wrap_dim("size", d, dim())];
}

namespace {

// In-place ops cannot change the dtype: an int64 tensor and a scalar that no int64 holds (1.5,
// 1e30, NaN) would need a float result, which PyTorch refuses too ("result type Float can't be
// cast to the desired output type Long"; for add_'s alpha: "For integral input tensors, argument
// alpha must not be a floating point number").
void check_integral_scalar(const Tensor& t, double s, const char* op, const char* name) {
  if (t.dtype() == kInt64 && !detail::is_int64_value(s)) {
    std::ostringstream msg;
    msg << op << ": " << name << " " << s << " is not an integer in int64's range; an int64 tensor "
        << t.shape().str() << " cannot hold the float result in place (use .to(kFloat32) first)";
    throw DTypeError(msg.str());
  }
}

}  // namespace

void Tensor::throw_undefined() { throw ValueError("operation on an undefined tensor"); }

void Tensor::check_dtype(DType want, const char* what) const {
  if (dtype() != want)
    throw DTypeError(std::string(what) + ": tensor " + shape().str() + " has dtype " +
                     to_string(dtype()) + ", not " + to_string(want));
}

void Tensor::check_host_access(DType want, const char* what) const {
  if (!device().is_cpu()) {
    const std::string dev = device().str();
    throw DeviceError(std::string(what) + ": the tensor is on " + dev +
                      " (device memory); host code cannot read it. This operation has no path "
                      "for cuda:k tensors (docs/cuda.md lists the ops that do): copy the tensor "
                      "to the host with .to(lockstep::cpu()) first; backends use "
                      "device_data_ptr()");
  }
  check_dtype(want, what);
}

double Tensor::item() const {
  if (numel() != 1)
    throw ShapeError("item(): expected a tensor with one element, got shape " + shape().str());
  if (!device().is_cpu()) return to(cpu()).item();
  switch (dtype()) {
    case DType::Float32:
      return *data_ptr<float>();
    case DType::Float64:
      return *data_ptr<double>();
    case DType::Int64:
      return static_cast<double>(*data_ptr<std::int64_t>());
  }
  return 0;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  if (!device().is_cpu()) return detach().to(cpu()).to_vector<T>();
  std::vector<T> out(static_cast<std::size_t>(numel()));
  switch (dtype()) {
    case DType::Float32: {
      auto* p = data_ptr<float>();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
      break;
    }
    case DType::Float64: {
      auto* p = data_ptr<double>();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
      break;
    }
    case DType::Int64: {
      auto* p = data_ptr<std::int64_t>();
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
      break;
    }
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;

Tensor& Tensor::requires_grad_(bool r) {
  if (!is_leaf())
    throw AutogradError("requires_grad_(): only leaf tensors can change requires_grad (shape " +
                        shape().str() + ")");
  if (r && !is_floating(dtype()))
    throw AutogradError("requires_grad_(): only float tensors can require gradients, got " +
                        to_string(dtype()));
  impl().requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(impl().grad); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined() && g.shape() != shape())
    throw ShapeError("set_grad: gradient shape " + g.shape().str() + " does not match tensor " +
                     shape().str());
  impl().grad = g.impl_ptr();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  if (!requires_grad())
    throw AutogradError("backward(): tensor of shape " + shape().str() +
                        " does not require grad and has no grad_fn");
  Tensor g = gradient;
  if (!g.defined()) {
    if (numel() != 1)
      throw AutogradError(
          "backward(): grad can be implicitly created only for scalar outputs, got shape " +
          shape().str());
    g = ones(shape(), options());
  } else if (g.shape() != shape()) {
    throw ShapeError("backward(): gradient shape " + g.shape().str() +
                     " does not match output shape " + shape().str());
  } else if (g.device() != device() && (g.device().is_cuda() || device().is_cuda())) {
    throw DeviceError("backward(): gradient on " + g.device().str() + " for an output on " +
                      device().str());
  }
  autograd::run_backward(*this, g, retain_graph);
}

int Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) {
  if (!is_leaf())
    throw AutogradError("register_post_accumulate_grad_hook: only leaf tensors accumulate grad");
  auto& im = impl();
  int id = im.next_hook_id++;
  im.post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(int id) {
  auto& hooks = impl().post_accumulate_hooks;
  std::erase_if(hooks, [id](const auto& h) { return h.first == id; });
}

Tensor Tensor::detach() const { return detail::alias(*this, impl().offset, shape()); }

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  check_device_available(device);
  Tensor out = empty(shape(), options().device(device));
  if (device.is_cpu() && this->device().is_cpu())
    std::memcpy(out.raw_data(), raw_data(),
                static_cast<std::size_t>(numel()) * element_size(dtype()));
  else
    cuda_ops::copy(*this, out);
  if (autograd::needs_grad({this}))
    autograd::record("ToDeviceBackward", out, {this}, [src = this->device()](const Tensor& g) {
      return std::vector<Tensor>{g.to(src)};
    });
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  if (!device().is_cpu()) {  // through host memory: cast there, copy back
    Tensor out = detach().to(cpu()).to(dtype).to(device());
    if (is_floating(dtype) && autograd::needs_grad({this}))
      autograd::record("ToDTypeBackward", out, {this}, [src = this->dtype()](const Tensor& g) {
        return std::vector<Tensor>{g.to(src)};
      });
    return out;
  }
  Tensor out = empty(shape(), options().dtype(dtype));
  std::int64_t n = numel();
  auto convert = [&](auto* dst) {
    using D = std::remove_pointer_t<decltype(dst)>;
    auto v = to_vector<D>();
    if (n > 0) std::memcpy(dst, v.data(), static_cast<std::size_t>(n) * sizeof(D));
  };
  switch (dtype) {
    case DType::Float32:
      convert(out.data_ptr<float>());
      break;
    case DType::Float64:
      convert(out.data_ptr<double>());
      break;
    case DType::Int64:
      convert(out.data_ptr<std::int64_t>());
      break;
  }
  if (is_floating(dtype) && autograd::needs_grad({this}))
    autograd::record("ToDTypeBackward", out, {this}, [src = this->dtype()](const Tensor& g) {
      return std::vector<Tensor>{g.to(src)};
    });
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), options());
  if (device().is_cpu())
    std::memcpy(out.raw_data(), raw_data(),
                static_cast<std::size_t>(numel()) * element_size(dtype()));
  else
    cuda_ops::copy(*this, out);
  if (autograd::needs_grad({this}))
    autograd::record("CloneBackward", out, {this},
                     [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

void Tensor::set_data(const Tensor& other) {
  auto& me = impl();
  const auto& o = other.impl();
  me.storage = o.storage;
  me.offset = o.offset;
  me.shape = o.shape;
  me.dtype = o.dtype;
}

namespace {
void check_inplace(const Tensor& t, const char* op) {
  if (t.is_leaf() && t.requires_grad() && GradMode::is_enabled())
    throw AutogradError(std::string(op) +
                        ": a leaf tensor that requires grad is used in an in-place operation "
                        "(wrap the update in lockstep::no_grad)");
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  if (src.shape() != shape())
    throw ShapeError("copy_: source shape " + src.shape().str() + " does not match " +
                     shape().str());
  if (!device().is_cpu() || !src.device().is_cpu()) {  // any pair of devices, one a GPU
    cuda_ops::copy(src.dtype() == dtype() ? src : src.detach().to(dtype()), *this);
  } else if (src.dtype() == dtype()) {
    std::memmove(raw_data(), src.raw_data(),
                 static_cast<std::size_t>(numel()) * element_size(dtype()));
  } else {
    Tensor c = src.detach().to(dtype());
    std::memcpy(raw_data(), c.raw_data(),
                static_cast<std::size_t>(numel()) * element_size(dtype()));
  }
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  // PyTorch: "value cannot be converted to type int64_t without overflow" (also NaN); in C++ the
  // conversion would be undefined behaviour. A fraction is truncated toward zero, as PyTorch.
  if (dtype() == kInt64 && !detail::fits_int64(value)) {
    std::ostringstream msg;
    msg << "fill_: value " << value << " cannot be converted to int64 without overflow (tensor "
        << shape().str() << ")";
    throw ValueError(msg.str());
  }
  if (!device().is_cpu()) {
    cuda_ops::fill(*this, value);
    return *this;
  }
  std::int64_t n = numel();
  switch (dtype()) {
    case DType::Float32: {
      auto* p = data_ptr<float>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(value);
      break;
    }
    case DType::Float64: {
      auto* p = data_ptr<double>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = value;
      break;
    }
    case DType::Int64: {
      auto* p = data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<std::int64_t>(value);
      break;
    }
  }
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  detail::check_same("add_", *this, other);
  if (other.numel() != numel() && other.numel() != 1)
    throw ShapeError("add_: cannot add " + other.shape().str() + " into " + shape().str());
  check_integral_scalar(*this, alpha, "add_", "alpha");
  if (!device().is_cpu()) {
    if (dtype() == kInt64) {
      // As the CPU loop: self[i] + T(alpha)·other[i] (other[i] alone when alpha == 1), wrapping;
      // through the broadcasting kernel into a scratch tensor, then copied back.
      const Tensor o =
          detail::alias(other, other.impl().offset, other.numel() == numel() ? shape() : Shape{});
      Tensor term = o;
      if (alpha != 1.0) {
        term = empty(o.shape(), options());
        cuda_ops::binary_broadcast(
            kernels::BinaryOp::Mul, o,
            scalar_tensor(static_cast<double>(static_cast<std::int64_t>(alpha)), options()), term);
      }
      Tensor sum = empty(shape(), options());
      cuda_ops::binary_broadcast(kernels::BinaryOp::Add, *this, term, sum);
      cuda_ops::copy(sum, *this);
      return *this;
    }
    cuda_ops::add_(*this, other, alpha);
    return *this;
  }
  std::int64_t n = numel();
  bool bcast = other.numel() == 1 && n != 1;
  auto go = [&](auto* p, const auto* q) {
    using T = std::remove_pointer_t<decltype(p)>;
    T a = static_cast<T>(alpha);
    if constexpr (std::is_integral_v<T>) {  // int64 wraps on overflow, as PyTorch
      for (std::int64_t i = 0; i < n; ++i)
        p[i] = detail::wrapping_add(
            p[i], alpha == 1.0 ? q[bcast ? 0 : i] : detail::wrapping_mul(a, q[bcast ? 0 : i]));
    } else if (bcast) {
      T v = a * q[0];
      for (std::int64_t i = 0; i < n; ++i) p[i] += v;
    } else if (alpha == 1.0) {
      for (std::int64_t i = 0; i < n; ++i) p[i] += q[i];
    } else {
      for (std::int64_t i = 0; i < n; ++i) p[i] += a * q[i];
    }
  };
  switch (dtype()) {
    case DType::Float32:
      go(data_ptr<float>(), other.data_ptr<float>());
      break;
    case DType::Float64:
      go(data_ptr<double>(), other.data_ptr<double>());
      break;
    case DType::Int64:
      go(data_ptr<std::int64_t>(), other.data_ptr<std::int64_t>());
      break;
  }
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_inplace(*this, "mul_");
  check_integral_scalar(*this, value, "mul_", "value");
  if (!device().is_cpu()) {
    if (dtype() == kInt64) {  // self[i]·T(value), wrapping, as the CPU loop
      Tensor product = empty(shape(), options());
      cuda_ops::binary_broadcast(
          kernels::BinaryOp::Mul, *this,
          scalar_tensor(static_cast<double>(static_cast<std::int64_t>(value)), options()), product);
      cuda_ops::copy(product, *this);
      return *this;
    }
    cuda_ops::mul_(*this, value);
    return *this;
  }
  std::int64_t n = numel();
  auto go = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    T v = static_cast<T>(value);
    for (std::int64_t i = 0; i < n; ++i) p[i] = detail::wrapping_mul(p[i], v);  // int64 wraps
  };
  switch (dtype()) {
    case DType::Float32:
      go(data_ptr<float>());
      break;
    case DType::Float64:
      go(data_ptr<double>());
      break;
    case DType::Int64:
      go(data_ptr<std::int64_t>());
      break;
  }
  return *this;
}

Tensor Tensor::reshape(const Shape& s) const { return lockstep::reshape(*this, s); }
Tensor Tensor::flatten(int start_dim) const {
  int sd = detail::wrap_dim("flatten", start_dim, std::max(dim(), 1));
  Shape s;
  std::int64_t rest = 1;
  for (int i = 0; i < dim(); ++i) {
    if (i < sd)
      s.push_back(shape()[i]);
    else
      rest *= shape()[i];
  }
  s.push_back(rest);
  return lockstep::reshape(*this, s);
}
Tensor Tensor::narrow(int d, std::int64_t start, std::int64_t length) const {
  return lockstep::narrow(*this, d, start, length);
}
Tensor Tensor::t() const { return lockstep::t(*this); }
Tensor Tensor::sum() const { return lockstep::sum(*this); }
Tensor Tensor::sum(int d, bool keepdim) const { return lockstep::sum(*this, d, keepdim); }
Tensor Tensor::mean() const { return lockstep::mean(*this); }
Tensor Tensor::mean(int d, bool keepdim) const { return lockstep::mean(*this, d, keepdim); }
Tensor Tensor::argmax(int d, bool keepdim) const { return lockstep::argmax(*this, d, keepdim); }
Tensor Tensor::matmul(const Tensor& o) const { return lockstep::matmul(*this, o); }

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  auto v = to_vector<double>();
  if (v.size() <= 64) {
    os << '[';
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "], ";
  }
  os << "shape=" << shape().str() << ", dtype=" << to_string(dtype())
     << ", device=" << device().str() << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---- factories ---------------------------------------------------------------------------------

Tensor empty(const Shape& shape, TensorOptions opts) { return Tensor::empty(shape, opts); }

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
  if (step == 0) throw ValueError("arange: step must be non-zero");
  double n = std::ceil((end - start) / step);
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
  Tensor t = Tensor::empty(shape, opts.requires_grad(false));
  Generator& g = gen ? *gen : default_generator();
  std::unique_lock<std::mutex> lock(g.mutex(), std::defer_lock);
  if (!gen) lock.lock();
  auto range = static_cast<std::uint64_t>(high - low);
  std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    auto v = low + static_cast<std::int64_t>(g.next_below(range));
    switch (t.dtype()) {
      case DType::Float32:
        t.data_ptr<float>()[i] = static_cast<float>(v);
        break;
      case DType::Float64:
        t.data_ptr<double>()[i] = static_cast<double>(v);
        break;
      case DType::Int64:
        t.data_ptr<std::int64_t>()[i] = v;
        break;
    }
  }
  return t;
}

Tensor randperm(std::int64_t n, Generator* gen) {
  if (n < 0) throw ValueError("randperm: n must be non-negative, got " + std::to_string(n));
  Tensor t = arange(n);
  Generator& g = gen ? *gen : default_generator();
  std::unique_lock<std::mutex> lock(g.mutex(), std::defer_lock);
  if (!gen) lock.lock();
  auto* p = t.data_ptr<std::int64_t>();
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
