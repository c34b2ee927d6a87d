// Internal: the checks and pointer helpers batch_norm (src/ops/batch_norm.cpp) and
// SyncBatchNorm's pieces (src/ops/batch_norm_sync.cpp) share.
#pragma once

#include <string>

#include "lockstep/core/tensor.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/pool_norm_bodies.h"

namespace lockstep::detail {

/// ShapeError naming `op` unless x is 2-4-d; DTypeError unless float32/float64. Returns x's
/// geometry as [n, c, spatial].
inline kernels::shared::BnGeom batch_norm_geometry(const char* op, const Tensor& x) {
  check_floating(op, x);
  if (x.dim() < 2 || x.dim() > 4)
    throw ShapeError(std::string(op) +
                     ": expected a 2-d [N, C], 3-d [N, C, L] or 4-d [N, C, H, W] input, got " +
                     x.shape().str());
  kernels::shared::BnGeom g;
  g.n = x.size(0);
  g.c = x.size(1);
  for (int i = 2; i < x.dim(); ++i) g.spatial *= x.size(i);
  return g;
}

/// For an optional per-channel tensor t (undefined: nothing to check): same device and dtype as
/// x (DeviceError / DTypeError) and shape [C] (ShapeError naming `what`).
inline void check_channel_tensor(const char* op, const char* what, const Tensor& t,
                                 const Tensor& x) {
  if (!t.defined()) return;
  check_same(op, x, t);
  if (t.dim() != 1 || t.size(0) != x.size(1))
    throw ShapeError(std::string(op) + ": " + what + " " + t.shape().str() +
                     " does not match input " + x.shape().str() + " (expected [" +
                     std::to_string(x.size(1)) + "], one value per channel)");
}

/// The element pointer of t on its device (host or CUDA), null for an undefined t.
template <class T>
T* bn_ptr(const Tensor& t) {
  if (!t.defined()) return nullptr;
  return t.device().is_cuda() ? t.device_data_ptr<T>() : t.data_ptr<T>();
}

}  // namespace lockstep::detail
