#include "lockstep/optim/sgd.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/detail/cuda_steps.h"
#include "optim/flat_step.h"
#include "lockstep/ops/detail/update_rules.h"

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
// One SGD update of n elements with the shared per-element formula (update_rules.h).
template <class T>
void sgd_update(T* p, const T* g, T* buf, bool first, std::int64_t n,
                const rules::SgdScalars<T>& s) {
  for (std::int64_t i = 0; i < n; ++i)
    p[i] = rules::sgd_element(p[i], g[i], buf ? buf + i : nullptr, first, s);
}
}  // namespace

void SGD::step() { step_elementwise(); }

std::int64_t SGD::step_flat(const detail::FlatPlan& plan) {
  bool any = false;
  for (const auto& s : plan.segments) any = any || s.has_grad;
  if (!any) return 0;  // nothing to update, no state to create
  const bool momentum = options_.momentum != 0;
  const Tensor buf = momentum ? flat_state("momentum_buffer", plan) : Tensor();
  std::vector<cuda_ops::FlatUpdateSegment> segments;
  for (const auto& s : plan.segments) {
    if (!s.has_grad) continue;  // no gradient: untouched, no state created
    cuda_ops::FlatUpdateSegment u;
    u.param_offset = s.param_offset;
    u.grad_offset = s.grad_offset;
    u.state_offset = s.state_offset;
    u.numel = s.numel;
    u.first = momentum && !has_state(s.index, "momentum_buffer");
    segments.push_back(u);
  }
  if (graph_mode_ == GraphMode::Capture)
    for (const auto& u : segments)
      if (u.first)
        throw ValueError(
            "SGD step under CUDA graph capture: a parameter has no momentum buffer yet (make one "
            "eager step() before capturing)");
  const Tensor none;
  const int launched = cuda_ops::sgd_flat_step(
      plan.param_base_index == detail::kNoBase ? none : params_[plan.param_base_index],
      plan.grad_base_index == detail::kNoBase ? none : params_[plan.grad_base_index].grad(), buf,
      segments, lr_, options_.momentum, options_.dampening, options_.weight_decay,
      options_.nesterov, static_cast<cuda_ops::FlatMode>(flat_mode_value()), graph_table_.get());
  // The momentum buffer of a parameter's first step becomes state (update_param's rule); not
  // while capturing, when nothing has run (and no buffer is new).
  if (momentum && graph_mode_ != GraphMode::Capture)
    for (const auto& s : plan.segments)
      if (s.has_grad && !has_state(s.index, "momentum_buffer"))
        set_state(s.index, "momentum_buffer", flat_state_view(buf, plan, s.index));
  return launched;
}

void SGD::update_param(std::size_t i, const Tensor& grad) {
  const Tensor& p = params_[i];
  if (p.device().is_cuda() && grad.device() != p.device())
    throw DeviceError("SGD: parameter " + std::to_string(i) + " is on " + p.device().str() +
                      " but its gradient on " + grad.device().str());
  const SGDOptions& o = options_;
  // A first step ignores the buffer's contents (b = d): a new buffer is allocated here and
  // becomes state once the update is made.
  const bool first = o.momentum != 0 && !has_state(i, "momentum_buffer");
  const Tensor buf = o.momentum == 0 ? Tensor()
                     : first         ? zeros(p.shape(), p.options())
                                     : state_[i]["momentum_buffer"];
  if (p.device().is_cuda()) {
    // One fused launch over the whole parameter (cuda_ops::sgd_step) where the parameters do not
    // lie flat (step_flat otherwise).
    (void)cuda_ops::sgd_step(p, grad, buf, first, lr_, o.momentum, o.dampening, o.weight_decay,
                             o.nesterov);
  } else if (p.dtype() == kFloat64) {
    sgd_update<double>(
        p.data_ptr<double>(), grad.data_ptr<double>(),
        buf.defined() ? buf.data_ptr<double>() : nullptr, first, p.numel(),
        rules::sgd_scalars<double>(lr_, o.momentum, o.dampening, o.weight_decay, o.nesterov));
  } else {
    sgd_update<float>(
        p.data_ptr<float>(), grad.data_ptr<float>(),
        buf.defined() ? buf.data_ptr<float>() : nullptr, first, p.numel(),
        rules::sgd_scalars<float>(lr_, o.momentum, o.dampening, o.weight_decay, o.nesterov));
  }
  if (first) set_state(i, "momentum_buffer", buf);
}

}  // namespace lockstep::optim
