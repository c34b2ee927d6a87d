#include "optim/flat_step.h"

#include <algorithm>

namespace lockstep::optim::detail {

namespace {

FlatPlan not_flat(std::string why) {
  FlatPlan p;
  p.reason = std::move(why);
  return p;
}

std::string param(std::size_t i) { return "parameter " + std::to_string(i); }

}  // namespace

FlatPlan plan_flat_step(const std::vector<FlatParamInfo>& params, std::size_t element_size) {
  if (element_size == 0) return not_flat("element size 0");
  const auto es = static_cast<std::uintptr_t>(element_size);
  FlatPlan plan;
  // Parameters with elements, by address; the storages of parameters and gradients.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const FlatParamInfo& p = params[i];
    if (p.numel < 0) return not_flat(param(i) + " has a negative size");
    if (p.numel == 0) continue;
    if (!order.empty() && p.storage != params[order.front()].storage)
      return not_flat(param(order.front()) + " and " + param(i) + " lie in different storages");
    order.push_back(i);
    if (!p.has_grad) continue;
    if (p.grad_storage == p.storage)
      return not_flat("the gradient of " + param(i) + " lies in the parameters' storage");
    if (plan.grad_base_index == kNoBase) {
      plan.grad_base_index = i;
    } else {
      const FlatParamInfo& first = params[plan.grad_base_index];
      if (p.grad_storage != first.grad_storage)
        return not_flat("the gradients of " + param(plan.grad_base_index) + " and " + param(i) +
                        " lie in different storages");
      if (p.grad_address < first.grad_address) plan.grad_base_index = i;
    }
  }
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return params[a].address < params[b].address; });
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    const FlatParamInfo &a = params[order[k]], &b = params[order[k + 1]];
    // a ends at or before b begins (numel · es does not overflow for a real allocation; a
    // larger one is refused as overlapping).
    const auto bytes = static_cast<std::uintptr_t>(a.numel) * es;
    if (static_cast<std::uintptr_t>(a.numel) > UINTPTR_MAX / es || b.address - a.address < bytes)
      return not_flat(param(order[k]) + " and " + param(order[k + 1]) + " overlap");
  }
  const std::uintptr_t base = order.empty() ? 0 : params[order.front()].address;
  const std::uintptr_t grad_base =
      plan.grad_base_index == kNoBase ? 0 : params[plan.grad_base_index].grad_address;
  if (!order.empty()) plan.param_base_index = order.front();
  std::int64_t state = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const FlatParamInfo& p = params[i];
    FlatSegment s;
    s.index = i;
    s.numel = p.numel;
    s.has_grad = p.has_grad;
    s.state_offset = state;
    if (p.numel > INT64_MAX - state) return not_flat("the parameters hold more than 2^63 elements");
    state += p.numel;
    if (p.numel > 0) {
      if ((p.address - base) % es != 0)
        return not_flat(param(i) + " does not start a whole number of elements after " +
                        param(plan.param_base_index));
      s.param_offset = static_cast<std::int64_t>((p.address - base) / es);
      if (p.has_grad) {
        if ((p.grad_address - grad_base) % es != 0)
          return not_flat("the gradient of " + param(i) +
                          " does not start a whole number of elements after that of " +
                          param(plan.grad_base_index));
        s.grad_offset = static_cast<std::int64_t>((p.grad_address - grad_base) / es);
      }
    }
    plan.segments.push_back(s);
  }
  plan.state_numel = state;
  plan.flat = true;
  return plan;
}

}  // namespace lockstep::optim::detail
