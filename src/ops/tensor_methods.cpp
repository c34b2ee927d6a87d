// Tensor methods that run kernels or record autograd nodes: item, to_vector, backward, detach,
// to (device, dtype), clone, the shape and reduction shorthands, str. Declared in
// include/lockstep/core/tensor.h; defined here, in the op layer, because they call ops (core
// depends on no other layer: docs/design.md, "Layers"). In-place methods: tensor_inplace.cpp.
#include <cstring>
#include <ostream>
#include <sstream>

#include "lockstep/autograd/node.h"
#include "lockstep/core/tensor.h"
#include "lockstep/ops/ops.h"
#include "ops/cuda_ops.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep {

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
    throw ShapeError("backward(): mismatch in shape: the gradient has a shape of " +
                     g.shape().str() + " and the output has a shape of " + shape().str());
  } else if (g.dtype() != dtype()) {  // torch: "Mismatch in dtype" (the leaf's .grad would
                                      // take the gradient's dtype)
    throw DTypeError("backward(): mismatch in dtype: the gradient has dtype " +
                     to_string(g.dtype()) + " and the output (shape " + shape().str() +
                     ") has dtype " + to_string(dtype()));
  } else if (g.device() != device() && (g.device().is_cuda() || device().is_cuda())) {
    throw DeviceError("backward(): gradient on " + g.device().str() + " for an output on " +
                      device().str());
  }
  autograd::run_backward(*this, g, retain_graph);
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
Tensor Tensor::reshape(const Shape& s) const { return lockstep::reshape(*this, s); }
Tensor Tensor::flatten(int start_dim) const { return lockstep::flatten(*this, start_dim); }
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
  if (numel() <= 64) {
    // int64 elements as integers, every digit (a double holds only 53 bits: 2^62 + 1 printed as
    // 4.61169e+18); float elements in the stream's default format
    auto print = [&](const auto& v) {
      os << '[';
      for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
      os << "], ";
    };
    if (dtype() == kInt64)
      print(to_vector<std::int64_t>());
    else
      print(to_vector<double>());
  }
  os << "shape=" << shape().str() << ", dtype=" << to_string(dtype())
     << ", device=" << device().str() << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }
}  // namespace lockstep
