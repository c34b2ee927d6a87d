// Tensor's in-place methods: copy_, fill_, add_, mul_. Declared in
// include/lockstep/core/tensor.h; defined here, in the op layer, because their cuda:k paths run
// kernels (core depends on no other layer: docs/design.md, "Layers").
#include <cstring>
#include <sstream>

#include "ops/wrapping.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/tensor.h"
#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

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

}  // namespace lockstep
