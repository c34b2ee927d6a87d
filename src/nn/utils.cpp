#include "lockstep/nn/utils.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/format.h"

namespace lockstep::nn::utils {

namespace {

// Σ|x|^p over `v`, accumulated in float64 (p = inf: max |x|, NaN if any is NaN).
double power_sum(const std::vector<double>& v, double p) {
  double s = 0;
  if (std::isinf(p)) {
    for (double x : v) {
      const double a = std::abs(x);
      if (std::isnan(a)) return a;
      s = std::max(s, a);
    }
  } else if (p == 2.0) {
    for (double x : v) s += x * x;
  } else if (p == 1.0) {
    for (double x : v) s += std::abs(x);
  } else {
    for (double x : v) s += std::pow(std::abs(x), p);
  }
  return s;
}

void check_clip_arguments(double max_norm, double norm_type) {
  if (!std::isfinite(max_norm) || max_norm < 0)
    throw ValueError("clip_grad_norm_: max_norm must be finite and non-negative, got " +
                     exact_string(max_norm));
  if (!(norm_type > 0))
    throw ValueError("clip_grad_norm_: norm_type must be positive (or inf), got " +
                     exact_string(norm_type));
}

}  // namespace

double grad_power_sum(const Tensor& g, double p) {
  if (g.dtype() != kFloat32 && g.dtype() != kFloat64)
    throw DTypeError("grad_power_sum: the gradient is " + to_string(g.dtype()) +
                     ", expected float32 or float64");
  return power_sum(g.detach().to_vector<double>(), p);
}

double norm_from_power_sum(double s, double p) {
  if (std::isinf(p) || p == 1.0) return s;
  if (p == 2.0) return std::sqrt(s);
  return std::pow(s, 1.0 / p);
}

double clip_grads_with_norms_(const std::vector<Tensor>& grads, const std::vector<double>& norms,
                              double max_norm, double norm_type, bool all_float) {
  check_clip_arguments(max_norm, norm_type);
  if (norms.empty()) return 0.0;
  // PyTorch computes in the gradients' dtype: round to float32 where it would.
  auto round = [all_float](double v) {
    return all_float ? static_cast<double>(static_cast<float>(v)) : v;
  };
  // The total: the norm of the per-parameter norms, each rounded as PyTorch's would be.
  std::vector<double> rounded;
  for (double n : norms) rounded.push_back(round(n));
  const double total = round(norm_from_power_sum(power_sum(rounded, norm_type), norm_type));

  // clip_coef = max_norm / (total_norm + 1e-6); Tensor.__rdiv__ is reciprocal() * max_norm.
  double coef;
  if (all_float) {
    float denom = static_cast<float>(total) + static_cast<float>(1e-6);
    coef = static_cast<double>((1.0f / denom) * static_cast<float>(max_norm));
  } else {
    coef = (1.0 / (total + 1e-6)) * max_norm;
  }
  if (!std::isnan(coef)) coef = std::min(coef, 1.0);  // torch.clamp(max=1.0) keeps NaN
  if (coef == 1.0) return total;
  NoGradGuard no_grad;
  for (const Tensor& g : grads) Tensor(g).mul_(coef);
  return total;
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  check_clip_arguments(max_norm, norm_type);
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    if (!parameters[i].defined())
      throw ValueError("clip_grad_norm_: parameter " + std::to_string(i) + " is undefined");
    Tensor g = parameters[i].grad();
    if (!g.defined()) continue;
    if (g.dtype() != kFloat32 && g.dtype() != kFloat64)
      throw DTypeError("clip_grad_norm_: gradient of parameter " + std::to_string(i) + " is " +
                       to_string(g.dtype()) + ", expected float32 or float64");
    grads.push_back(g);
  }
  bool all_float = true;
  std::vector<double> norms;
  for (const auto& g : grads) {
    all_float = all_float && g.dtype() == kFloat32;
    norms.push_back(norm_from_power_sum(grad_power_sum(g, norm_type), norm_type));
  }
  return clip_grads_with_norms_(grads, norms, max_norm, norm_type, all_float);
}

}  // namespace lockstep::nn::utils
