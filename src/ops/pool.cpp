// max_pool2d, avg_pool2d and adaptive_avg_pool2d (lockstep/ops/pool.h): checks as PyTorch's
// pool2d_shape_check (aten/src/ATen/native/Pool.h) and adaptive_avg_pool2d's, the kernels of
// src/ops/pool_norm_kernels.h on the CPU or src/ops/cuda_pool_norm_ops.h on a GPU, and a
// backward node per op that runs the matching backward kernel (first-order gradients only: the
// gradient it returns records no history).
#include "lockstep/ops/pool.h"

#include <string>

#include "ops/cuda_pool_norm_ops.h"
#include "lockstep/ops/detail/op_utils.h"
#include "ops/pool_norm_kernels.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;
using kernels::PoolGeom;

namespace {

// The input seen as planes: x [N, C, H, W] or [C, H, W]. ShapeError for another rank or an empty
// non-batch dimension (PyTorch: "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch
// size for input").
PoolGeom planes_of(const char* op, const Tensor& x) {
  detail::check_floating(op, x);
  const int d = x.dim();
  if (d != 3 && d != 4)
    throw ShapeError(std::string(op) +
                     ": expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got " +
                     x.shape().str());
  for (int i = d - 3; i < d; ++i)
    if (x.size(i) == 0)
      throw ShapeError(std::string(op) + ": input " + x.shape().str() +
                       " has an empty non-batch dimension " + std::to_string(i) +
                       " (only the batch dimension N may be 0)");
  PoolGeom g;
  g.planes = d == 4 ? x.size(0) * x.size(1) : x.size(0);
  g.in_h = x.size(-2);
  g.in_w = x.size(-1);
  return g;
}

// Kernel, stride, padding and output size of max_pool2d / avg_pool2d (dilation 1, ceil_mode
// false): out = floor((in + 2·p − k) / s) + 1.
PoolGeom window_geom(const char* op, const Tensor& x, Size2 k, std::optional<Size2> stride,
                     Size2 p) {
  PoolGeom g = planes_of(op, x);
  const Size2 s = stride.value_or(k);
  if (k[0] < 1 || k[1] < 1)
    throw ValueError(std::string(op) + ": kernel size must be at least 1, got " + to_string(k));
  if (s[0] < 1 || s[1] < 1)
    throw ValueError(std::string(op) + ": stride must be at least 1, got " + to_string(s));
  if (p[0] < 0 || p[1] < 0)
    throw ValueError(std::string(op) + ": padding must be non-negative, got " + to_string(p));
  if (p[0] > k[0] / 2 || p[1] > k[1] / 2)
    throw ValueError(std::string(op) + ": padding " + to_string(p) +
                     " must be at most half the kernel " + to_string(k) +
                     " (PyTorch: pad should be at most half of kernel size)");
  auto out = [](std::int64_t in, std::int64_t kk, std::int64_t ss, std::int64_t pp) {
    const std::int64_t span = in + 2 * pp - kk;
    return span < 0 ? std::int64_t{0} : span / ss + 1;
  };
  g.out_h = out(g.in_h, k[0], s[0], p[0]);
  g.out_w = out(g.in_w, k[1], s[1], p[1]);
  if (g.out_h < 1 || g.out_w < 1)
    throw ShapeError(std::string(op) + ": input " + x.shape().str() + " is too small for kernel " +
                     to_string(k) + " with padding " + to_string(p) +
                     " (the output would be empty); use a smaller kernel or more padding");
  g.k_h = k[0], g.k_w = k[1], g.s_h = s[0], g.s_w = s[1], g.p_h = p[0], g.p_w = p[1];
  return g;
}

Shape out_shape(const Tensor& x, const PoolGeom& g) {
  Shape s;
  for (int i = 0; i + 2 < x.dim(); ++i) s.push_back(x.size(i));
  s.push_back(g.out_h);
  s.push_back(g.out_w);
  return s;
}

int device_of(const Tensor& t) { return t.device().index; }

}  // namespace

Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  const PoolGeom g = window_geom("max_pool2d", x, kernel, stride, padding);
  Tensor out = empty(out_shape(x, g), x.options());
  Tensor index = empty(out.shape(), x.options().dtype(kInt64));
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (x.device().is_cuda())
      cuda_pool_norm::max_pool2d<T>(x.device_data_ptr<T>(), out.device_data_ptr<T>(),
                                    index.device_data_ptr<std::int64_t>(), g, device_of(x));
    else
      kernels::dispatch::max_pool2d<T>(x.data_ptr<T>(), out.data_ptr<T>(),
                                       index.data_ptr<std::int64_t>(), g);
  });
  if (needs_grad({&x}))
    record("MaxPool2DBackward", out, {&x}, [index, g, shape = x.shape()](const Tensor& gy) {
      Tensor gx = empty(shape, gy.options());
      detail::visit_float(gy.dtype(), [&](auto zero) {
        using T = decltype(zero);
        if (gy.device().is_cuda())
          cuda_pool_norm::max_pool2d_backward<T>(gy.device_data_ptr<T>(),
                                                 index.device_data_ptr<std::int64_t>(),
                                                 gx.device_data_ptr<T>(), g, device_of(gy));
        else
          kernels::dispatch::max_pool2d_backward<T>(
              gy.data_ptr<T>(), index.data_ptr<std::int64_t>(), gx.data_ptr<T>(), g);
      });
      return std::vector<Tensor>{gx};
    });
  return out;
}

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  const PoolGeom g = window_geom("avg_pool2d", x, kernel, stride, padding);
  Tensor out = empty(out_shape(x, g), x.options());
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (x.device().is_cuda())
      cuda_pool_norm::avg_pool2d<T>(x.device_data_ptr<T>(), out.device_data_ptr<T>(), g,
                                    device_of(x));
    else
      kernels::dispatch::avg_pool2d<T>(x.data_ptr<T>(), out.data_ptr<T>(), g);
  });
  if (needs_grad({&x}))
    record("AvgPool2DBackward", out, {&x}, [g, shape = x.shape()](const Tensor& gy) {
      Tensor gx = empty(shape, gy.options());
      detail::visit_float(gy.dtype(), [&](auto zero) {
        using T = decltype(zero);
        if (gy.device().is_cuda())
          cuda_pool_norm::avg_pool2d_backward<T>(gy.device_data_ptr<T>(), gx.device_data_ptr<T>(),
                                                 g, device_of(gy));
        else
          kernels::dispatch::avg_pool2d_backward<T>(gy.data_ptr<T>(), gx.data_ptr<T>(), g);
      });
      return std::vector<Tensor>{gx};
    });
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  PoolGeom g = planes_of("adaptive_avg_pool2d", x);
  if (output_size[0] < 1 || output_size[1] < 1)
    throw ValueError("adaptive_avg_pool2d: output size must be at least [1, 1], got " +
                     to_string(output_size) + " for input " + x.shape().str());
  g.out_h = output_size[0];
  g.out_w = output_size[1];
  Tensor out = empty(out_shape(x, g), x.options());
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if (x.device().is_cuda())
      cuda_pool_norm::adaptive_avg_pool2d<T>(x.device_data_ptr<T>(), out.device_data_ptr<T>(), g,
                                             device_of(x));
    else
      kernels::dispatch::adaptive_avg_pool2d<T>(x.data_ptr<T>(), out.data_ptr<T>(), g);
  });
  if (needs_grad({&x}))
    record("AdaptiveAvgPool2DBackward", out, {&x}, [g, shape = x.shape()](const Tensor& gy) {
      Tensor gx = empty(shape, gy.options());
      detail::visit_float(gy.dtype(), [&](auto zero) {
        using T = decltype(zero);
        if (gy.device().is_cuda())
          cuda_pool_norm::adaptive_avg_pool2d_backward<T>(
              gy.device_data_ptr<T>(), gx.device_data_ptr<T>(), g, device_of(gy));
        else
          kernels::dispatch::adaptive_avg_pool2d_backward<T>(gy.data_ptr<T>(), gx.data_ptr<T>(), g);
      });
      return std::vector<Tensor>{gx};
    });
  return out;
}

}  // namespace lockstep
