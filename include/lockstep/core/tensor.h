// Tensor: a reference-counted handle to a contiguous, row-major block of float32, float64 or
// int64 elements with a shape and a device tag, plus its autograd state. Copies of a Tensor share
// the same data (as in PyTorch); use clone() for a deep copy.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lockstep/core/device.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/generator.h"
#include "lockstep/core/shape.h"
#include "lockstep/core/storage.h"

namespace lockstep {

namespace autograd {
class Node;
class AccumulateGrad;
}  // namespace autograd

class Tensor;

/// Called with the parameter once its gradient is final within a backward pass
/// (torch.Tensor.register_post_accumulate_grad_hook). The tensor's grad() holds the gradient.
using PostAccumulateGradHook = std::function<void(Tensor&)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::int64_t offset = 0;  // in elements
  Shape shape;
  DType dtype = DType::Float32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;
  std::shared_ptr<TensorImpl> grad;
  std::weak_ptr<autograd::AccumulateGrad> grad_accumulator;
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_hooks;
  int next_hook_id = 0;
  // Where backward may write this leaf's gradient in place (autograd::set_grad_destination),
  // and whether a formula already did in the current backward.
  std::shared_ptr<TensorImpl> grad_destination;
  bool grad_destination_taken = false;
};

/// dtype / device / requires_grad for factory functions, builder style like torch::TensorOptions.
struct TensorOptions {
  DType dtype_ = DType::Float32;
  Device device_{};
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}  // NOLINT(google-explicit-constructor)
  TensorOptions(Device d) : device_(d) {}  // NOLINT(google-explicit-constructor)
  TensorOptions dtype(DType t) const {
    auto o = *this;
    o.dtype_ = t;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Uninitialised tensor of `shape`. Throws DeviceError if the device is unavailable,
  /// ValueError for a negative dimension.
  static Tensor empty(const Shape& shape, TensorOptions opts = {});

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  std::vector<std::int64_t> sizes() const { return impl().shape.vec(); }
  /// Size of dimension `d` (negative counts from the end). Throws IndexError when out of range.
  std::int64_t size(int d) const {
    const Shape& s = shape();
    return d >= 0 && d < s.size() ? s[d] : size_wrapped(d);
  }
  int dim() const { return impl().shape.size(); }
  std::int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }

  /// Typed host pointer to the first element, for host code (every CPU kernel and loop).
  /// Throws DTypeError if T does not match dtype(), and DeviceError for a tensor whose storage is
  /// not host memory (a cuda:k tensor): host code must never dereference device memory, so an op
  /// without a CUDA path fails here, naming the device, instead of reading garbage. Backends use
  /// device_data_ptr().
  template <class T>
  T* data_ptr() const {
    const TensorImpl& im = impl();
    if (im.dtype != dtype_of<T>::value || !im.storage->device().is_cpu()) [[unlikely]]
      check_host_access(dtype_of<T>::value, "data_ptr");
    return static_cast<T*>(im.storage->data()) + im.offset;
  }
  /// Untyped host pointer to the first element; DeviceError as data_ptr() for a non-CPU tensor.
  void* raw_data() const {
    const TensorImpl& im = impl();
    if (!im.storage->device().is_cpu()) [[unlikely]]
      check_host_access(im.dtype, "raw_data");
    return static_cast<char*>(im.storage->data()) + im.offset * element_size(im.dtype);
  }
  /// Typed pointer to the first element wherever the storage lives (device memory for cuda:k),
  /// for backends: CUDA kernels, NCCL, copies. Never dereference it on the host unless
  /// device().is_cpu(). Throws DTypeError if T does not match dtype().
  template <class T>
  T* device_data_ptr() const {
    const TensorImpl& im = impl();
    if (im.dtype != dtype_of<T>::value) [[unlikely]]
      check_dtype(dtype_of<T>::value, "device_data_ptr");
    return static_cast<T*>(im.storage->data()) + im.offset;
  }
  /// Untyped device_data_ptr().
  void* device_raw_data() const {
    const TensorImpl& im = impl();
    return static_cast<char*>(im.storage->data()) + im.offset * element_size(im.dtype);
  }
  /// The single element of a one-element tensor, converted to double (copied to the host for a
  /// cuda:k tensor, which waits for the device). Throws ShapeError otherwise.
  double item() const;
  template <class T>
  T item() const {
    return static_cast<T>(item());
  }
  /// All elements as a vector of T (converted from the tensor's dtype; copied from the device
  /// first for a cuda:k tensor).
  template <class T>
  std::vector<T> to_vector() const;

  // ---- autograd -------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  /// Marks a leaf as requiring grad (torch.Tensor.requires_grad_). Throws AutogradError for a
  /// non-leaf or an int64 tensor.
  Tensor& requires_grad_(bool r = true);
  /// The accumulated gradient; undefined (defined() == false) when none, as PyTorch's None.
  Tensor grad() const;
  void set_grad(const Tensor& g);
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  /// Backpropagates from this tensor. Without `gradient` the tensor must hold one element
  /// (AutogradError otherwise, naming the shape). A given `gradient` must have this tensor's shape
  /// and dtype (ShapeError / DTypeError naming both, as torch's "Mismatch in shape/dtype").
  /// `retain_graph` keeps saved tensors so the graph can be traversed again.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  /// Registers a hook run when this leaf's gradient is final within a backward pass; returns an
  /// id for remove_post_accumulate_grad_hook. Throws AutogradError on a non-leaf.
  int register_post_accumulate_grad_hook(PostAccumulateGradHook hook);
  void remove_post_accumulate_grad_hook(int id);
  /// A tensor sharing this data with no autograd history.
  Tensor detach() const;

  // ---- copies and in-place ----------------------------------------------------------------
  /// Deep copy with the same dtype/device; differentiable.
  Tensor clone() const;
  /// A copy on `device` (this tensor itself if already there); differentiable. Between cpu and
  /// cuda:k and between CUDA devices (cudaMemcpyAsync on the compute stream; host to device
  /// through a pinned staging buffer; device to host waits for the copy). DeviceError for an
  /// unavailable device.
  Tensor to(Device device) const;
  /// A copy converted to `dtype` (this tensor itself if already that dtype); differentiable
  /// between float dtypes. On a cuda:k tensor the conversion goes through host memory.
  Tensor to(DType dtype) const;
  /// Replaces this tensor's data, shape, dtype and device with `other`'s, keeping identity and
  /// autograd flags (PyTorch's `param.data = other`).
  void set_data(const Tensor& other);
  /// In-place ops. Throw AutogradError on a leaf requiring grad while grad mode is on. All work
  /// on cuda:k tensors; copy_ also copies between devices (src converted to this dtype first),
  /// add_ needs `other` on this tensor's device (DeviceError otherwise). On an int64 tensor
  /// add_'s alpha and mul_'s value must be integers in int64's range (DTypeError otherwise, as
  /// PyTorch refuses a float result in place); the arithmetic wraps on overflow.
  Tensor& copy_(const Tensor& src);
  /// Sets every element to `value` converted to the dtype (int64: truncated toward zero;
  /// ValueError for NaN or a value outside int64's range, as PyTorch). full() and scalar_tensor()
  /// fill this way.
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double value);

  // ---- views and shape ops (member spellings of the free functions in ops.h) -----------------
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const { return reshape(shape); }
  Tensor flatten(int start_dim = 0) const;
  Tensor narrow(int dim, std::int64_t start, std::int64_t length) const;
  Tensor t() const;
  Tensor sum() const;
  Tensor sum(int dim, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(int dim, bool keepdim = false) const;
  Tensor argmax(int dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;

  /// "tensor([[1, 2], ...], dtype=float32, device=cpu:0)" for small tensors; int64 elements with
  /// every digit.
  std::string str() const;

  TensorImpl& impl() const {
    if (!impl_) [[unlikely]]
      throw_undefined();
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::int64_t size_wrapped(int d) const;  // size() for negative or out-of-range d
  void check_dtype(DType want, const char* what) const;
  // data_ptr/raw_data's slow path: DeviceError for a non-CPU tensor, else check_dtype.
  void check_host_access(DType want, const char* what) const;
  [[noreturn]] static void throw_undefined();
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories (torch.zeros, torch.ones, ...) ----------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
/// [start, end) in steps of `step` (torch.arange); int64 unless opts says otherwise. Throws
/// ValueError for step == 0, for a start, end or step that is NaN or infinite (naming it; torch:
/// "unsupported range: 0 -> nan") and for a range of more elements than int64 counts.
Tensor arange(double start, double end, double step = 1, TensorOptions opts = kInt64);
Tensor arange(std::int64_t end, TensorOptions opts = kInt64);
/// Standard normal samples; float dtypes only. The random factories draw from `gen` or the
/// default generator: on an MT19937 one they are torch.randn/rand/randint/randperm bit for bit
/// (lockstep/ops/random.h), on Philox Lockstep's own (Box-Muller over Philox uniforms here).
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
/// Uniform samples in [0, 1); float dtypes only.
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
/// Uniform integers in [low, high) (torch.randint); int64 by default. ValueError if high <= low.
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape,
               TensorOptions opts = kInt64, Generator* gen = nullptr);
/// A random permutation of 0..n-1 (torch.randperm), int64, Fisher-Yates over `gen`.
Tensor randperm(std::int64_t n, Generator* gen = nullptr);
/// Copies `values` into a new tensor of `shape` (1-d of values.size() when shape is empty).
/// Throws ShapeError when the counts differ.
Tensor tensor(std::span<const float> values, const Shape& shape = {}, TensorOptions opts = {});
Tensor tensor(std::span<const double> values, const Shape& shape = {},
              TensorOptions opts = kFloat64);
Tensor tensor(std::span<const std::int64_t> values, const Shape& shape = {},
              TensorOptions opts = kInt64);
inline Tensor tensor(std::initializer_list<float> v, const Shape& shape = {},
                     TensorOptions opts = {}) {
  return tensor(std::span<const float>(v.begin(), v.size()), shape, opts);
}
/// A 0-d tensor holding `value`.
Tensor scalar_tensor(double value, TensorOptions opts = {});

}  // namespace lockstep
