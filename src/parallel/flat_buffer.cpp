#include "lockstep/parallel/flat_buffer.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "lockstep/ops/detail/op_utils.h"

namespace lockstep::parallel {

FlatBuffer FlatBuffer::build(const std::vector<Tensor>& params, Device device,
                             const Tensor* storage_of) {
  FlatBuffer f;
  DType dtype = params.empty() ? kFloat32 : params.front().dtype();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].dtype() != dtype)
      throw DTypeError("flat parameter buffer: parameter " + std::to_string(i) + " is " +
                       to_string(params[i].dtype()) + " but parameter 0 is " + to_string(dtype) +
                       "; all parameters must share one dtype");
    f.offsets.push_back(f.numel);
    f.shapes.push_back(params[i].shape());
    f.numel += params[i].numel();
  }
  if (storage_of) {
    if (storage_of->numel() != f.numel || storage_of->dtype() != dtype)
      throw ShapeError("flat parameter buffer: existing buffer " + storage_of->shape().str() +
                       " does not fit " + std::to_string(f.numel) + " elements");
    if (storage_of->device() == device) {
      f.buffer = *storage_of;
    } else {
      // The same memory as a storage of `device` (CPU devices only; DeviceError otherwise).
      auto impl = std::make_shared<TensorImpl>();
      impl->storage = std::make_shared<Storage>(storage_of->impl().storage, device);
      impl->offset = storage_of->impl().offset;
      impl->shape = storage_of->shape();
      impl->dtype = dtype;
      f.buffer = Tensor(std::move(impl));
    }
  } else {
    f.buffer = empty({f.numel}, TensorOptions(dtype).device(device));
  }
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i];
    Tensor view = f.view_of(f.buffer, i);
    if (!storage_of)
      view.copy_(p.detach());  // same dtype: a memmove on the host, else a device copy
    p.set_data(view);
    f.params.push_back(p);
  }
  return f;
}

Tensor FlatBuffer::view_of(const Tensor& flat, std::size_t i) const {
  // One handle on flat's storage (what detach, narrow and reshape give, without their two
  // intermediate handles and checks: the layout is this buffer's own). ShapeError for a flat
  // tensor that is not a 1-d buffer of this layout.
  if (flat.dim() != 1 || flat.numel() != numel)
    throw ShapeError("FlatBuffer::view_of: expected a 1-d buffer of " + std::to_string(numel) +
                     " elements, got " + flat.shape().str());
  return lockstep::detail::alias(flat, flat.impl().offset + offsets[i], shapes[i]);
}

}  // namespace lockstep::parallel
