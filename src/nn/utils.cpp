#include "lockstep/nn/utils.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/core/format.h"

namespace lockstep::nn::utils {

namespace {

// ‖v‖_p with the sum accumulated in float64 (p = inf: max |v|; empty: 0).
double norm_of(const std::vector<double>& v, double p) {
  if (std::isinf(p)) {
    double m = 0;
    for (double x : v) {
      double a = std::abs(x);
      if (std::isnan(a)) return a;
      m = std::max(m, a);
    }
    return m;
  }
  double s = 0;
  if (p == 2.0) {
    for (double x : v) s += x * x;
    return std::sqrt(s);
  }
  if (p == 1.0) {
    for (double x : v) s += std::abs(x);
    return s;
  }
  for (double x : v) s += std::pow(std::abs(x), p);
  return std::pow(s, 1.0 / p);
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  if (!std::isfinite(max_norm) || max_norm < 0)
    throw ValueError("clip_grad_norm_: max_norm must be finite and non-negative, got " +
                     exact_string(max_norm));
  if (!(norm_type > 0))
    throw ValueError("clip_grad_norm_: norm_type must be positive (or inf), got " + exact_string(norm_type));
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
  if (grads.empty()) return 0.0;
  bool all_float = true;
  for (const auto& g : grads) all_float = all_float && g.dtype() == kFloat32;
  // PyTorch computes in the gradients' dtype: round to float32 where it would.
  auto round = [all_float](double v) {
    return all_float ? static_cast<double>(static_cast<float>(v)) : v;
  };

  std::vector<double> norms;
  for (const auto& g : grads)
    norms.push_back(round(norm_of(g.detach().to_vector<double>(), norm_type)));
  const double total = round(norm_of(norms, norm_type));

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
  for (auto& g : grads) g.mul_(coef);
  return total;
}

}  // namespace lockstep::nn::utils
