#include "lockstep/optim/adam.h"

#include <cmath>

#include "lockstep/autograd/grad_mode.h"
#include "ops/cuda_ops.h"

namespace lockstep::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions o) : Adam(std::move(params), o, false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions o, bool decoupled)
    : Optimizer(std::move(params)), options_(o), decoupled_(decoupled) {
  const char* who = decoupled ? "AdamW" : "Adam";
  set_lr(o.lr);
  if (!(o.eps >= 0)) throw ValueError(std::string(who) + ": invalid eps " + std::to_string(o.eps));
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
    throw ValueError(std::string(who) + ": betas must be in [0, 1), got (" +
                     std::to_string(o.beta1) + ", " + std::to_string(o.beta2) + ")");
  if (!(o.weight_decay >= 0))
    throw ValueError(std::string(who) + ": invalid weight_decay " + std::to_string(o.weight_decay));
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : Adam(std::move(params), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true) {}

namespace {
// One Adam/AdamW update of n elements. p, g, m and v never overlap (the parameter, its gradient
// and two state tensors), so they are __restrict and the loop vectorises; the library is built
// with -fno-math-errno, so std::sqrt is the vector square root instruction (same correctly
// rounded result).
template <class T>
void adam_update(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                 std::int64_t n, const AdamOptions& o, double lr, double step, bool decoupled) {
  const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T one_b1 = static_cast<T>(1 - o.beta1), one_b2 = static_cast<T>(1 - o.beta2);
  const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
  const T step_size = static_cast<T>(lr / bc1);
  const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T eps = static_cast<T>(o.eps), wd = static_cast<T>(o.weight_decay);
  const T decay = static_cast<T>(1 - lr * o.weight_decay);
  for (std::int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (decoupled)
      p[i] = p[i] * decay;
    else if (o.weight_decay != 0)
      gi = gi + wd * p[i];
    m[i] = m[i] * b1 + one_b1 * gi;
    v[i] = v[i] * b2 + one_b2 * gi * gi;
    T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] - step_size * (m[i] / denom);
  }
}
}  // namespace

void Adam::step() {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;  // no gradient: untouched, no state created
    Tensor& step_t = state_[i].count("step") ? state_[i]["step"]
                                              : (state_[i]["step"] = scalar_tensor(0, kFloat64));
    double step = step_t.item() + 1;
    step_t.fill_(step);
    Tensor& m = state_or_zeros(i, "exp_avg");
    Tensor& v = state_or_zeros(i, "exp_avg_sq");
    if (p.device().is_cuda()) {
      if (g.device() != p.device())
        throw DeviceError(std::string(decoupled_ ? "AdamW" : "Adam") + ": parameter " +
                          std::to_string(i) + " is on " + p.device().str() +
                          " but its gradient on " + g.device().str());
      cuda_ops::adam_step(p, g, m, v, lr_, options_.beta1, options_.beta2, options_.eps,
                          options_.weight_decay, step, decoupled_);
    } else if (p.dtype() == kFloat64)
      adam_update<double>(p.data_ptr<double>(), g.data_ptr<double>(), m.data_ptr<double>(),
                          v.data_ptr<double>(), p.numel(), options_, lr_, step, decoupled_);
    else
      adam_update<float>(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(),
                         v.data_ptr<float>(), p.numel(), options_, lr_, step, decoupled_);
  }
}

}  // namespace lockstep::optim
