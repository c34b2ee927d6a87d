// SyncBatchNorm's pieces (lockstep/ops/batch_norm.h): the per-piece statistics and gradient sums,
// the merge of a group's statistics, and the normalization / input gradient from merged ones,
// after PyTorch's torch/nn/modules/_functions.py (class SyncBatchNorm) and the kernels of
// aten/src/ATen/native/cuda/Normalization.cuh. The per-channel work runs on the kernels of
// src/ops/pool_norm_kernels.h (CPU) or src/ops/cuda_pool_norm_ops.h (GPU); the merge is a host
// loop over at most W·C values.
#include <cmath>
#include <string>

#include "lockstep/ops/batch_norm.h"
#include "ops/batch_norm_common.h"
#include "ops/cuda_pool_norm_ops.h"
#include "ops/pool_norm_bodies.h"
#include "ops/pool_norm_kernels.h"

namespace lockstep {

using detail::bn_ptr;
using kernels::BnGeom;
namespace sh = kernels::shared;

namespace {

// ShapeError / DTypeError / DeviceError unless `stats` is [2, C] float64 on x's device.
void check_stats(const char* op, const char* what, const Tensor& stats, const Tensor& x) {
  detail::check_defined(op, stats);
  if (stats.dtype() != kFloat64)
    throw DTypeError(std::string(op) + ": " + what + " must be float64, got " +
                     to_string(stats.dtype()));
  if (stats.device() != x.device())
    throw DeviceError(std::string(op) + ": " + what + " is on " + stats.device().str() +
                      ", the input on " + x.device().str());
  if (stats.dim() != 2 || stats.size(0) != 2 || stats.size(1) != x.size(1))
    throw ShapeError(std::string(op) + ": " + what + " " + stats.shape().str() +
                     " does not match input " + x.shape().str() + " (expected [2, " +
                     std::to_string(x.size(1)) + "])");
}

void check_like(const char* op, const Tensor& dy, const Tensor& x) {
  detail::check_same(op, dy, x);
  if (dy.shape() != x.shape())
    throw ShapeError(std::string(op) + ": grad_output " + dy.shape().str() +
                     " does not match input " + x.shape().str());
}

Tensor f64_like(const Tensor& x, std::int64_t rows, std::int64_t cols) {
  return zeros({rows, cols}, x.options().dtype(kFloat64));
}

// running = momentum·stat + (1 − momentum)·running, in double and rounded once (batch_norm's).
void update_running(Tensor& running, const double* stat, std::int64_t c, double momentum) {
  if (!running.defined()) return;
  Tensor host = running.to(cpu()).to(kFloat64);
  double* r = host.data_ptr<double>();
  for (std::int64_t i = 0; i < c; ++i) r[i] = sh::bn_running(r[i], stat[i], momentum);
  running.copy_(host.to(running.dtype()).to(running.device()));
}

}  // namespace

Tensor batch_norm_stats(const Tensor& x) {
  constexpr const char* op = "batch_norm_stats";
  const BnGeom g = detail::batch_norm_geometry(op, x);
  Tensor out = f64_like(x, 2, g.c);
  if (x.numel() == 0) return out;
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    double* mean = bn_ptr<double>(out);
    if (x.device().is_cuda())
      cuda_pool_norm::batch_norm_stats<T>(bn_ptr<T>(x), g, mean, mean + g.c, x.device().index);
    else
      kernels::dispatch::batch_norm_stats<T>(bn_ptr<T>(x), g, mean, mean + g.c);
  });
  return out;
}

BatchNormGathered batch_norm_gather_stats(const Tensor& rows, const Tensor& running_mean,
                                          const Tensor& running_var, double momentum,
                                          double eps) {
  constexpr const char* op = "batch_norm_gather_stats";
  detail::check_defined(op, rows);
  if (rows.dtype() != kFloat64 || rows.dim() != 2 || rows.size(1) < 3 || rows.size(1) % 2 != 1)
    throw ShapeError(std::string(op) + ": expected float64 rows [W, 2C + 1], got " +
                     to_string(rows.dtype()) + " " + rows.shape().str());
  const std::int64_t w = rows.size(0), c = (rows.size(1) - 1) / 2;
  for (const Tensor* t : {&running_mean, &running_var})
    if (t->defined() && (t->dim() != 1 || t->size(0) != c))
      throw ShapeError(std::string(op) + ": running statistic " + t->shape().str() +
                       " does not match " + std::to_string(c) + " channels");
  const Tensor host = rows.to(cpu());
  const double* r = host.data_ptr<double>();
  // Counts first: every check before anything is updated.
  std::int64_t total = 0;
  for (std::int64_t j = 0; j < w; ++j) {
    const double n = r[j * (2 * c + 1) + 2 * c];
    if (!(n >= 0) || std::trunc(n) != n)
      throw ValueError(std::string(op) + ": row " + std::to_string(j) + " has count " +
                       std::to_string(n) + " (expected a whole number >= 0)");
    total += static_cast<std::int64_t>(n);
  }
  if (total == 1)
    throw ValueError(std::string(op) +
                     ": expected more than 1 value per channel when training, got 1 over the "
                     "whole group (PyTorch's check: use a batch with more than one value per "
                     "channel, or eval mode)");
  BatchNormGathered out;
  out.count = total;
  out.mean_invstd = zeros({2, c}, kFloat64);
  if (total == 0) return out;  // every piece empty: nothing to normalize, nothing updated
  double* mean = out.mean_invstd.data_ptr<double>();
  double* invstd = mean + c;
  Tensor unbiased = zeros({c}, kFloat64);
  double* var = unbiased.data_ptr<double>();
  for (std::int64_t ch = 0; ch < c; ++ch) {
    double avg = 0, m2 = 0, n = 0;
    for (std::int64_t j = 0; j < w; ++j) {
      const double* row = r + j * (2 * c + 1);
      const double nj = row[2 * c];
      if (nj == 0) continue;
      const double mu = row[ch], f = 1.0 / (n + nj), d = avg - mu;
      m2 += row[c + ch] * nj + d * d * n * nj * f;
      avg = n * f * avg + nj * f * mu;
      n += nj;
    }
    mean[ch] = avg;
    invstd[ch] = sh::bn_invstd(m2 / n, eps);
    var[ch] = m2 / (n - 1);
  }
  Tensor rm = running_mean, rv = running_var;
  update_running(rm, mean, c, momentum);
  update_running(rv, var, c, momentum);
  return out;
}

Tensor batch_norm_elemt(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Tensor& mean_invstd) {
  constexpr const char* op = "batch_norm_elemt";
  const BnGeom g = detail::batch_norm_geometry(op, x);
  detail::check_channel_tensor(op, "weight", weight, x);
  detail::check_channel_tensor(op, "bias", bias, x);
  check_stats(op, "mean_invstd", mean_invstd, x);
  Tensor out = empty(x.shape(), x.options());
  if (x.numel() == 0) return out;
  const Tensor& stats = mean_invstd;
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const double* mean = bn_ptr<double>(stats);
    if (x.device().is_cuda())
      cuda_pool_norm::batch_norm_apply<T>(bn_ptr<T>(x), mean, mean + g.c, bn_ptr<T>(weight),
                                          bn_ptr<T>(bias), g, bn_ptr<T>(out), x.device().index);
    else
      kernels::dispatch::batch_norm_apply<T>(bn_ptr<T>(x), mean, mean + g.c, bn_ptr<T>(weight),
                                             bn_ptr<T>(bias), g, bn_ptr<T>(out));
  });
  return out;
}

Tensor batch_norm_backward_reduce(const Tensor& dy, const Tensor& x, const Tensor& mean_invstd) {
  constexpr const char* op = "batch_norm_backward_reduce";
  const BnGeom g = detail::batch_norm_geometry(op, x);
  check_like(op, dy, x);
  check_stats(op, "mean_invstd", mean_invstd, x);
  Tensor out = f64_like(x, 2, g.c);
  if (x.numel() == 0) return out;
  const Tensor& stats = mean_invstd;
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    double* sum = bn_ptr<double>(out);
    if (x.device().is_cuda())
      cuda_pool_norm::batch_norm_backward_reduce<T>(bn_ptr<T>(dy), bn_ptr<T>(x),
                                                    bn_ptr<double>(stats), g, sum, sum + g.c,
                                                    x.device().index);
    else
      kernels::dispatch::batch_norm_backward_reduce<T>(bn_ptr<T>(dy), bn_ptr<T>(x),
                                                       bn_ptr<double>(stats), g, sum, sum + g.c);
  });
  return out;
}

Tensor batch_norm_backward_elemt(const Tensor& dy, const Tensor& x, const Tensor& mean_invstd,
                                 const Tensor& weight, const Tensor& sums, std::int64_t count) {
  constexpr const char* op = "batch_norm_backward_elemt";
  const BnGeom g = detail::batch_norm_geometry(op, x);
  check_like(op, dy, x);
  detail::check_channel_tensor(op, "weight", weight, x);
  check_stats(op, "mean_invstd", mean_invstd, x);
  check_stats(op, "sums", sums, x);
  if (count < 1)
    throw ValueError(std::string(op) + ": the group's count must be >= 1, got " +
                     std::to_string(count));
  Tensor out = empty(x.shape(), x.options());
  if (x.numel() == 0) return out;
  const Tensor& stats = mean_invstd, &s = sums;
  detail::visit_float(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const double* mean = bn_ptr<double>(stats);
    const double* sum = bn_ptr<double>(s);
    const double n = static_cast<double>(count);
    if (x.device().is_cuda())
      cuda_pool_norm::batch_norm_backward_elemt<T>(bn_ptr<T>(dy), bn_ptr<T>(x), mean, mean + g.c,
                                                   bn_ptr<T>(weight), sum, sum + g.c, n, g,
                                                   bn_ptr<T>(out), x.device().index);
    else
      kernels::dispatch::batch_norm_backward_elemt<T>(bn_ptr<T>(dy), bn_ptr<T>(x), mean,
                                                      mean + g.c, bn_ptr<T>(weight), sum,
                                                      sum + g.c, n, g, bn_ptr<T>(out));
  });
  return out;
}

}  // namespace lockstep
