// layer_norm (lockstep/ops/layer_norm.h): checks as torch.nn.functional.layer_norm and
// aten/src/ATen/native/layer_norm.cpp (_check_layer_norm_inputs); statistics, normalization and
// backward through the kernels of src/ops/layer_norm_embedding_kernels.h on the CPU or
// src/ops/cuda_layer_norm_embedding_ops.h on a GPU. Each row's mean and rstd (double) are saved
// for backward, as PyTorch saves them.
#include "lockstep/ops/layer_norm.h"

#include <string>

#include "ops/batch_norm_common.h"
#include "ops/cuda_layer_norm_embedding_ops.h"
#include "ops/layer_norm_embedding_kernels.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;
using detail::bn_ptr;
using kernels::LnGeom;

namespace {

constexpr const char* kLayerNorm = "layer_norm";

// x viewed as [rows, cols]; ShapeError naming both shapes unless normalized_shape is non-empty
// and x's trailing sizes are normalized_shape.
LnGeom layer_norm_geometry(const Tensor& x, const Shape& normalized_shape) {
  detail::check_floating(kLayerNorm, x);
  if (normalized_shape.size() == 0)
    throw ShapeError(std::string(kLayerNorm) +
                     ": expected normalized_shape to be at least 1-dimensional, i.e., containing "
                     "at least one element, but got normalized_shape=[] for input " +
                     x.shape().str());
  const int lead = x.dim() - normalized_shape.size();
  bool match = lead >= 0;
  for (int i = 0; match && i < normalized_shape.size(); ++i)
    match = x.size(lead + i) == normalized_shape[i];
  if (!match) {
    const std::string inner = normalized_shape.str().substr(1, normalized_shape.str().size() - 2);
    throw ShapeError(
        std::string(kLayerNorm) + ": given normalized_shape=" + normalized_shape.str() +
        ", expected input with shape [*, " + inner + "], but got input of size " + x.shape().str());
  }
  LnGeom g;
  g.rows = 1;
  for (int i = 0; i < lead; ++i) g.rows *= x.size(i);
  g.cols = normalized_shape.numel();
  return g;
}

// An optional weight or bias (undefined: nothing to check): x's dtype and device, shape
// normalized_shape (ShapeError naming `what`).
void check_affine(const char* what, const Tensor& t, const Tensor& x,
                  const Shape& normalized_shape) {
  if (!t.defined()) return;
  detail::check_same(kLayerNorm, x, t);
  if (t.shape() != normalized_shape)
    throw ShapeError(std::string(kLayerNorm) + ": " + what + " " + t.shape().str() +
                     " does not match normalized_shape " + normalized_shape.str() + " (input " +
                     x.shape().str() + ")");
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const LnGeom g = layer_norm_geometry(x, normalized_shape);
  check_affine("weight", weight, x, normalized_shape);
  check_affine("bias", bias, x, normalized_shape);

  Tensor out = empty(x.shape(), x.options());
  // [2, rows] float64 on x's device: row 0 the means, row 1 the rstd.
  Tensor stats = empty({2, g.rows}, x.options().dtype(kFloat64));
  const bool empty_input = x.numel() == 0;
  if (!empty_input) {
    detail::visit_float(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      double* mean = bn_ptr<double>(stats);
      if (x.device().is_cuda())
        cuda_layer_norm_embedding::layer_norm_forward<T>(bn_ptr<T>(x), bn_ptr<T>(weight),
                                                         bn_ptr<T>(bias), g, eps, bn_ptr<T>(out),
                                                         mean, mean + g.rows, x.device().index);
      else
        kernels::dispatch::layer_norm_forward<T>(bn_ptr<T>(x), bn_ptr<T>(weight), bn_ptr<T>(bias),
                                                 g, eps, bn_ptr<T>(out), mean, mean + g.rows);
    });
  }
  if (needs_grad({&x, &weight, &bias}))
    record("LayerNormBackward", out, {&x, &weight, &bias},
           [x, weight, bias_shape = bias.defined() ? bias.shape() : Shape(), stats, g, empty_input,
            rx = x.requires_grad(), rw = weight.defined() && weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& gy) {
             auto grad = [&](bool wanted, const Shape& shape) {
               // every element written below; with no rows nothing flows: zeros
               if (!wanted) return Tensor();
               return empty_input ? zeros(shape, x.options()) : empty(shape, x.options());
             };
             Tensor gx = grad(rx, x.shape());
             Tensor gw = grad(rw, weight.defined() ? weight.shape() : Shape());
             Tensor gb = grad(rb, bias_shape);
             if (empty_input) return std::vector<Tensor>{gx, gw, gb};
             detail::visit_float(x.dtype(), [&](auto zero) {
               using T = decltype(zero);
               const double* mean = bn_ptr<double>(stats);
               if (x.device().is_cuda())
                 cuda_layer_norm_embedding::layer_norm_backward<T>(
                     bn_ptr<T>(gy), bn_ptr<T>(x), mean, mean + g.rows, bn_ptr<T>(weight), g,
                     bn_ptr<T>(gx), bn_ptr<T>(gw), bn_ptr<T>(gb), x.device().index);
               else
                 kernels::dispatch::layer_norm_backward<T>(
                     bn_ptr<T>(gy), bn_ptr<T>(x), mean, mean + g.rows, bn_ptr<T>(weight), g,
                     bn_ptr<T>(gx), bn_ptr<T>(gw), bn_ptr<T>(gb));
             });
             return std::vector<Tensor>{gx, gw, gb};
           });
  return out;
}

}  // namespace lockstep
