// Flat parameter buffers: a replica's parameters become views into one contiguous buffer, so a
// broadcast is one copy, a bucket is one slice and an optimizer pass is one loop.
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::parallel {

struct FlatBuffer {
  Tensor buffer;                      // 1-d, all parameters back to back
  std::vector<Tensor> params;         // the parameters, now views into `buffer`
  std::vector<std::int64_t> offsets;  // element offset of each parameter
  std::vector<Shape> shapes;          // shape of each parameter
  std::int64_t numel = 0;

  /// Moves `params` (one dtype, one device; DTypeError / DeviceError naming the parameter
  /// otherwise) into a new buffer on `device`, keeping each Tensor's identity (set_data), so
  /// optimizers holding them follow. With `storage_of` given, the parameters become views of that
  /// existing buffer instead (same layout) and keep their values from it; when `storage_of` is
  /// on another CPU device, `buffer` is an alias of its memory tagged with `device` (Storage's
  /// alias constructor: cpu:k devices share RAM), so nothing is copied then either.
  static FlatBuffer build(const std::vector<Tensor>& params, Device device,
                          const Tensor* storage_of = nullptr);

  /// A view of parameter i's slice of `flat` (a buffer laid out like this one), shaped like it.
  Tensor view_of(const Tensor& flat, std::size_t i) const;
};

}  // namespace lockstep::parallel
