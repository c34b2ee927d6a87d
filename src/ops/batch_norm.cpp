// batch_norm (lockstep/ops/batch_norm.h): checks as torch.nn.functional.batch_norm and
// aten/src/ATen/native/Normalization.cpp, every check before any running statistic is touched;
// statistics, normalization and backward through the kernels of src/ops/pool_norm_kernels.h on
// the CPU or src/ops/cuda_pool_norm_ops.h on a GPU. The per-channel mean and invstd (double) are
// saved for backward, so a later change of running_mean / running_var does not alter the
// gradient of an eval-mode call.
#include "lockstep/ops/batch_norm.h"

#include <string>

#include "ops/batch_norm_common.h"
#include "ops/cuda_pool_norm_ops.h"
#include "ops/pool_norm_kernels.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;
using detail::bn_ptr;
using kernels::BnGeom;

namespace {

constexpr const char* kOp = "batch_norm";

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  const BnGeom g = detail::batch_norm_geometry(kOp, x);
  detail::check_channel_tensor(kOp, "running_mean", running_mean, x);
  detail::check_channel_tensor(kOp, "running_var", running_var, x);
  detail::check_channel_tensor(kOp, "weight", weight, x);
  detail::check_channel_tensor(kOp, "bias", bias, x);
  const std::int64_t m = g.n * g.spatial;
  if (training && m == 1)
    throw ValueError(std::string(kOp) +
                     ": expected more than 1 value per channel when training, got input size " +
                     x.shape().str() +
                     " (PyTorch's check: use a batch with more than one value per channel, or "
                     "eval mode)");
  if (!training && (!running_mean.defined() || !running_var.defined()))
    throw ValueError(std::string(kOp) +
                     ": eval mode (training false) needs running_mean and running_var; got " +
                     (running_mean.defined() ? "no running_var" : "no running_mean") +
                     " for input " + x.shape().str());

  Tensor out = empty(x.shape(), x.options());
  // [2, C] float64 on x's device: row 0 the mean, row 1 invstd.
  Tensor stats = empty({2, g.c}, x.options().dtype(kFloat64));
  const bool empty_input = x.numel() == 0;  // PyTorch: no statistics, no running update
  const int dev = x.device().index;
  const bool cuda = x.device().is_cuda();
  if (!empty_input) {
    detail::visit_float(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      double* mean = bn_ptr<double>(stats);
      double* invstd = mean + g.c;
      if (cuda) {
        if (training)
          cuda_pool_norm::batch_norm_train_stats<T>(bn_ptr<T>(x), g, eps, momentum,
                                                    bn_ptr<T>(running_mean), bn_ptr<T>(running_var), mean,
                                                    invstd, dev);
        else
          cuda_pool_norm::batch_norm_eval_stats<T>(bn_ptr<T>(running_mean), bn_ptr<T>(running_var), g,
                                                   eps, mean, invstd, dev);
        cuda_pool_norm::batch_norm_apply<T>(bn_ptr<T>(x), mean, invstd, bn_ptr<T>(weight), bn_ptr<T>(bias),
                                            g, bn_ptr<T>(out), dev);
      } else {
        if (training)
          kernels::dispatch::batch_norm_train_stats<T>(
              bn_ptr<T>(x), g, eps, momentum, bn_ptr<T>(running_mean), bn_ptr<T>(running_var), mean, invstd);
        else
          kernels::dispatch::batch_norm_eval_stats<T>(bn_ptr<T>(running_mean), bn_ptr<T>(running_var), g,
                                                      eps, mean, invstd);
        kernels::dispatch::batch_norm_apply<T>(bn_ptr<T>(x), mean, invstd, bn_ptr<T>(weight),
                                               bn_ptr<T>(bias), g, bn_ptr<T>(out));
      }
    });
  }
  if (needs_grad({&x, &weight, &bias}))
    record("BatchNormBackward", out, {&x, &weight, &bias},
           [x, weight, stats, g, training, empty_input, rx = x.requires_grad(),
            rw = weight.defined() && weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& gy) {
             Tensor gx = rx ? empty(x.shape(), x.options()) : Tensor();
             Tensor gw = rw ? empty({g.c}, x.options()) : Tensor();
             Tensor gb = rb ? empty({g.c}, x.options()) : Tensor();
             if (empty_input) {  // nothing flows: zero gradients of the parameters
               if (rw) gw.zero_();
               if (rb) gb.zero_();
               return std::vector<Tensor>{gx, gw, gb};
             }
             detail::visit_float(x.dtype(), [&](auto zero) {
               using T = decltype(zero);
               const double* mean = bn_ptr<double>(stats);
               if (x.device().is_cuda())
                 cuda_pool_norm::batch_norm_backward<T>(bn_ptr<T>(gy), bn_ptr<T>(x), mean, mean + g.c,
                                                        bn_ptr<T>(weight), g, training, bn_ptr<T>(gx),
                                                        bn_ptr<T>(gw), bn_ptr<T>(gb), x.device().index);
               else
                 kernels::dispatch::batch_norm_backward<T>(bn_ptr<T>(gy), bn_ptr<T>(x), mean, mean + g.c,
                                                           bn_ptr<T>(weight), g, training, bn_ptr<T>(gx),
                                                           bn_ptr<T>(gw), bn_ptr<T>(gb));
             });
             return std::vector<Tensor>{gx, gw, gb};
           });
  return out;
}

}  // namespace lockstep
