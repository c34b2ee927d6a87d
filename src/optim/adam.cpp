#include "lockstep/optim/adam.h"

#include <algorithm>
#include <cmath>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/detail/cuda_steps.h"
#include "optim/flat_step.h"
#include "lockstep/ops/detail/update_rules.h"

namespace lockstep::optim {

namespace {

std::vector<Tensor> group_params(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> out;
  for (const auto& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), std::nullopt}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions o)
    : Adam(one_group(std::move(params)), o, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled)
    : Optimizer(group_params(groups)), options_(o), decoupled_(decoupled) {
  const char* who = decoupled ? "AdamW" : "Adam";
  set_lr(o.lr);
  if (!(o.eps >= 0)) throw ValueError(std::string(who) + ": invalid eps " + std::to_string(o.eps));
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
    throw ValueError(std::string(who) + ": betas must be in [0, 1), got (" +
                     std::to_string(o.beta1) + ", " + std::to_string(o.beta2) + ")");
  if (!(o.weight_decay >= 0))
    throw ValueError(std::string(who) + ": invalid weight_decay " + std::to_string(o.weight_decay));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double wd = groups[g].weight_decay.value_or(o.weight_decay);
    if (!(wd >= 0) || !std::isfinite(wd))
      throw ValueError(std::string(who) + ": invalid weight_decay " + std::to_string(wd) +
                       " in parameter group " + std::to_string(g));
    weight_decay_.insert(weight_decay_.end(), groups[g].params.size(), wd);
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : AdamW(one_group(std::move(params)), o) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam(std::move(groups), AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}, true) {}

namespace {
// One Adam/AdamW update of n elements with the shared per-element formula (update_rules.h).
// p, g, m and v never overlap (the parameter, its gradient and two state tensors), so they are
// __restrict and the loop vectorises.
template <class T>
void adam_update(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                 std::int64_t n, const rules::AdamScalars<T>& s) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = rules::adam_element(p[i], g[i], m[i], v[i], s);
}
}  // namespace

void Adam::step() { step_elementwise(); }

std::int64_t Adam::step_flat(const detail::FlatPlan& plan) {
  bool any = false;
  for (const auto& s : plan.segments) any = any || s.has_grad;
  if (!any) return 0;  // nothing to update, no state to create, no step counted
  const Tensor m = flat_state("exp_avg", plan), v = flat_state("exp_avg_sq", plan);
  std::vector<cuda_ops::FlatUpdateSegment> segments;
  std::vector<double> steps(params_.size(), 0);
  for (const auto& s : plan.segments) {
    if (!s.has_grad) continue;  // no gradient: untouched, no state, step count not advanced
    const auto& st = state_[s.index];
    const auto step = st.find("step");
    // update_param's rules: the step after the stored one; state missing is zeros.
    steps[s.index] = (step == st.end() ? 0.0 : step->second.item()) + 1;
    cuda_ops::FlatUpdateSegment u;
    u.param_offset = s.param_offset;
    u.grad_offset = s.grad_offset;
    u.state_offset = s.state_offset;
    u.numel = s.numel;
    u.fresh_exp_avg = !st.count("exp_avg");
    u.fresh_exp_avg_sq = !st.count("exp_avg_sq");
    u.step = steps[s.index];
    segments.push_back(u);
  }
  if (graph_mode_ == GraphMode::Capture)
    for (const auto& u : segments)
      if (u.fresh_exp_avg || u.fresh_exp_avg_sq)
        throw ValueError(std::string(decoupled_ ? "AdamW" : "Adam") +
                         " step under CUDA graph capture: a parameter has no moment estimates "
                         "yet (make one eager step() before capturing)");
  // One launch per distinct weight decay (parameter groups), in order of first appearance; one
  // for the usual single group. A captured step has one table: groups that differ are refused.
  std::vector<double> decays;
  for (const auto& s : plan.segments)
    if (s.has_grad && std::find(decays.begin(), decays.end(), weight_decay_[s.index]) ==
                          decays.end())
      decays.push_back(weight_decay_[s.index]);
  if (decays.size() > 1 && graph_mode_ != GraphMode::Eager)
    throw ValueError(std::string(decoupled_ ? "AdamW" : "Adam") +
                     " step under CUDA graph capture: its parameter groups have different "
                     "weight_decay values; a captured step takes one (capture without groups, "
                     "or step eagerly)");
  const Tensor none;
  int launched = 0;
  for (const double wd : decays) {
    std::vector<cuda_ops::FlatUpdateSegment> part;
    for (std::size_t j = 0, u = 0; j < plan.segments.size(); ++j) {
      if (!plan.segments[j].has_grad) continue;
      if (weight_decay_[plan.segments[j].index] == wd) part.push_back(segments[u]);
      ++u;
    }
    launched += cuda_ops::adam_flat_step(
        plan.param_base_index == detail::kNoBase ? none : params_[plan.param_base_index],
        plan.grad_base_index == detail::kNoBase ? none : params_[plan.grad_base_index].grad(), m,
        v, part, lr_, options_.beta1, options_.beta2, options_.eps, wd, decoupled_,
        static_cast<cuda_ops::FlatMode>(flat_mode_value()), graph_table_.get());
  }
  // While capturing nothing has run: the host state advances when a replay is staged
  // (prepare_graph_replay runs this function in Stage mode).
  if (graph_mode_ == GraphMode::Capture) return launched;
  // update_param's rules: the step count advances; the moments become state.
  for (const auto& s : plan.segments) {
    if (!s.has_grad) continue;
    auto& st = state_[s.index];
    auto step = st.find("step");
    if (step == st.end()) step = st.emplace("step", scalar_tensor(0, kFloat64)).first;
    step->second.fill_(steps[s.index]);
    if (!st.count("exp_avg") || !st.count("exp_avg_sq")) {
      st["exp_avg"] = flat_state_view(m, plan, s.index);
      st["exp_avg_sq"] = flat_state_view(v, plan, s.index);
    }
  }
  return launched;
}

void Adam::update_param(std::size_t i, const Tensor& grad) {
  const Tensor& p = params_[i];
  const std::string name = decoupled_ ? "AdamW" : "Adam";
  if (p.device().is_cuda() && grad.device() != p.device())
    throw DeviceError(name + ": parameter " + std::to_string(i) + " is on " + p.device().str() +
                      " but its gradient on " + grad.device().str());
  auto& st = state_[i];
  const auto step_it = st.find("step");
  // The step after the stored one; moments missing (a first step) are zeros, state once the
  // update is made.
  const double step = (step_it == st.end() ? 0.0 : step_it->second.item()) + 1;
  const auto m_it = st.find("exp_avg"), v_it = st.find("exp_avg_sq");
  const bool fresh = m_it == st.end() || v_it == st.end();
  const Tensor m = m_it != st.end() ? m_it->second : zeros(p.shape(), p.options());
  const Tensor v = v_it != st.end() ? v_it->second : zeros(p.shape(), p.options());
  const AdamOptions& o = options_;
  if (p.device().is_cuda()) {
    // One fused launch over the whole parameter (cuda_ops::adam_step) where the parameters do not
    // lie flat (step_flat otherwise).
    (void)cuda_ops::adam_step(p, grad, m, v, lr_, o.beta1, o.beta2, o.eps, weight_decay_[i], step,
                              decoupled_);
  } else if (p.dtype() == kFloat64) {
    adam_update<double>(p.data_ptr<double>(), grad.data_ptr<double>(), m.data_ptr<double>(),
                        v.data_ptr<double>(), p.numel(),
                        rules::adam_scalars<double>(lr_, o.beta1, o.beta2, o.eps, weight_decay_[i],
                                                    step, decoupled_));
  } else {
    adam_update<float>(p.data_ptr<float>(), grad.data_ptr<float>(), m.data_ptr<float>(),
                       v.data_ptr<float>(), p.numel(),
                       rules::adam_scalars<float>(lr_, o.beta1, o.beta2, o.eps, weight_decay_[i],
                                                  step, decoupled_));
  }
  auto stored = st.find("step");
  if (stored == st.end()) stored = st.emplace("step", scalar_tensor(0, kFloat64)).first;
  stored->second.fill_(step);
  if (fresh) {
    st["exp_avg"] = m;
    st["exp_avg_sq"] = v;
  }
}

}  // namespace lockstep::optim
