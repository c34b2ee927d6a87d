#include "lockstep/optim/sgd.h"

#include "lockstep/autograd/grad_mode.h"
#include "ops/cuda_ops.h"

namespace lockstep::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : Optimizer(std::move(params)), options_(o) {
  set_lr(o.lr);
  if (o.momentum < 0) throw ValueError("SGD: invalid momentum " + std::to_string(o.momentum));
  if (o.weight_decay < 0)
    throw ValueError("SGD: invalid weight_decay " + std::to_string(o.weight_decay));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw ValueError("SGD: nesterov momentum requires a momentum > 0 and zero dampening");
}

namespace {
template <class T>
void sgd_update(T* p, const T* g, T* buf, bool first, std::int64_t n, const SGDOptions& o,
                double lr) {
  const T wd = static_cast<T>(o.weight_decay), mom = static_cast<T>(o.momentum);
  const T damp = static_cast<T>(1.0 - o.dampening), neg_lr = static_cast<T>(-lr);
  for (std::int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (o.weight_decay != 0) d = d + wd * p[i];
    if (o.momentum != 0) {
      T b = first ? d : buf[i] * mom + damp * d;
      buf[i] = b;
      d = o.nesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}
}  // namespace

void SGD::step() {
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;  // no gradient: untouched, no state created
    Tensor buf;
    bool first = false;
    if (options_.momentum != 0) {
      first = !has_state(i, "momentum_buffer");
      buf = state_or_zeros(i, "momentum_buffer");
    }
    if (p.device().is_cuda()) {
      if (g.device() != p.device())
        throw DeviceError("SGD: parameter " + std::to_string(i) + " is on " + p.device().str() +
                          " but its gradient on " + g.device().str());
      cuda_ops::sgd_step(p, g, buf, first, lr_, options_.momentum, options_.dampening,
                         options_.weight_decay, options_.nesterov);
    } else if (p.dtype() == kFloat64)
      sgd_update<double>(p.data_ptr<double>(), g.data_ptr<double>(),
                         buf.defined() ? buf.data_ptr<double>() : nullptr, first, p.numel(),
                         options_, lr_);
    else
      sgd_update<float>(p.data_ptr<float>(), g.data_ptr<float>(),
                        buf.defined() ? buf.data_ptr<float>() : nullptr, first, p.numel(),
                        options_, lr_);
  }
}

}  // namespace lockstep::optim
