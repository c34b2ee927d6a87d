// Tensor handle methods that only touch the handle and its storage: creation, dtype and device
// checks, the autograd flags and hooks. The methods and factories that run kernels or record
// autograd nodes (to, clone, copy_, add_, item, zeros, randn, ...) are declared in the same header
// but defined by the op layer, src/ops/tensor_methods.cpp, tensor_inplace.cpp and factories.cpp:
// core depends on no other layer (docs/design.md, "Layers").
#include "lockstep/core/tensor.h"

#include "lockstep/core/detail/wrap_dim.h"
#include "lockstep/core/pool.h"

namespace lockstep {

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) {
  // The byte count in 64 bits: a shape whose element or byte count overflows is refused
  // (PyTorch: "numel: integer multiplication overflow") instead of allocating a wrapped size.
  std::int64_t bytes = static_cast<std::int64_t>(element_size(opts.dtype_));
  bool empty_shape = false;
  for (auto d : shape) {
    if (d < 0) throw ValueError("negative dimension in shape " + shape.str());
    empty_shape = empty_shape || d == 0;
  }
  for (auto d : shape) {
    if (empty_shape) break;  // no elements, however large the other dimensions
    if (__builtin_mul_overflow(bytes, d, &bytes))
      throw ValueError("shape " + shape.str() + " has more elements than a tensor can hold " +
                       "(its size in bytes overflows 64 bits)");
  }
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

void Tensor::set_data(const Tensor& other) {
  auto& me = impl();
  const auto& o = other.impl();
  me.storage = o.storage;
  me.offset = o.offset;
  me.shape = o.shape;
  me.dtype = o.dtype;
}

Tensor empty(const Shape& shape, TensorOptions opts) { return Tensor::empty(shape, opts); }

}  // namespace lockstep
