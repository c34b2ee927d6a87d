// Optimizer (lockstep/optim/optimizer.h), the base class: its parameter list, the learning rate,
// the per-parameter state and its state_dict / load_state_dict. The steps it runs for the
// elementwise optimizers (per parameter, flat over one GPU buffer, captured in a CUDA graph) are
// in optimizer_step.cpp.
#include "lockstep/optim/optimizer.h"

#include <algorithm>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "optim/flat_step.h"  // ~Optimizer destroys the captured step's FlatPlan

namespace lockstep::optim {

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  if (params_.empty()) throw ValueError("optimizer got an empty parameter list");
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].defined())
      throw ValueError("optimizer parameter " + std::to_string(i) + " is undefined");
  for (std::size_t i = 0; i < params_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (params_[j].is_same(params_[i]))
        throw ValueError("optimizer parameters " + std::to_string(j) + " and " +
                         std::to_string(i) + " are the same tensor; list each once (tied "
                         "weights: nn::Module::parameters() lists a tied tensor once)");
  state_.resize(params_.size());
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (p.grad().defined()) {
      NoGradGuard g;
      p.grad().zero_();
    }
  }
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0)) throw ValueError("invalid learning rate " + std::to_string(lr));
  lr_ = lr;
}

Tensor& Optimizer::state_or_zeros(std::size_t index, const std::string& name) {
  auto& m = state_[index];
  auto it = m.find(name);
  if (it == m.end())
    it = m.emplace(name, zeros(params_[index].shape(), params_[index].options())).first;
  return it->second;
}

bool Optimizer::has_state(std::size_t index, const std::string& name) const {
  return state_[index].count(name) > 0;
}

void Optimizer::set_state(std::size_t index, const std::string& name, const Tensor& t) {
  state_[index][name] = t;
}

Tensor Optimizer::state(std::size_t index, const std::string& name) const {
  if (index >= state_.size()) return Tensor();
  auto it = state_[index].find(name);
  return it == state_[index].end() ? Tensor() : it->second;
}

StateDict Optimizer::state_dict() const {
  StateDict sd;
  for (std::size_t i = 0; i < state_.size(); ++i)
    for (const auto& name : state_names())
      if (auto it = state_[i].find(name); it != state_[i].end())
        // Copies; state of a cuda:k parameter is copied to the host (cpu:0), so a checkpoint
        // can be written from it and loaded on any device (load_state_dict moves it back).
        sd.insert("state." + std::to_string(i) + "." + name, it->second.device().is_cuda()
                                                                 ? it->second.detach().to(cpu())
                                                                 : it->second.detach().clone());
  sd.insert("param_groups.0.lr", scalar_tensor(lr_, kFloat64));
  return sd;
}

double Optimizer::parse_lr(const Tensor& value) {
  if (!value.defined() || value.numel() != 1 || !(value.item() >= 0))
    throw StateDictError(
        "optimizer load_state_dict: key 'param_groups.0.lr': expected a non-negative scalar "
        "learning rate");
  return value.item();
}

std::pair<std::size_t, std::string> Optimizer::parse_state_key(const std::string& key,
                                                               const Tensor& value) const {
  auto bad = [&key](const std::string& why) {
    return StateDictError("optimizer load_state_dict: key '" + key + "': " + why);
  };
  if (key.rfind("state.", 0) != 0) throw bad("unknown key");
  auto dot = key.find('.', 6);
  if (dot == std::string::npos) throw bad("expected state.<index>.<name>");
  std::size_t idx = 0;
  try {
    idx = std::stoul(key.substr(6, dot - 6));
  } catch (const std::exception&) {
    throw bad("parameter index is not a number");
  }
  std::string name = key.substr(dot + 1);
  if (idx >= params_.size())
    throw bad("parameter index out of range (" + std::to_string(params_.size()) + " parameters)");
  const auto names = state_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) throw bad("unknown state name");
  if (name != "step" && value.shape() != params_[idx].shape())
    throw bad("shape " + value.shape().str() + " does not match parameter shape " +
              params_[idx].shape().str());
  return {idx, name};
}

void Optimizer::load_state_dict(const StateDict& state) {
  std::vector<std::unordered_map<std::string, Tensor>> fresh(params_.size());
  double lr = lr_;
  for (const auto& [key, value] : state) {
    if (key == "param_groups.0.lr") {
      lr = parse_lr(value);
      continue;
    }
    const auto [idx, name] = parse_state_key(key, value);
    Tensor v = value.detach().to(name == "step" ? kFloat64 : params_[idx].dtype()).clone();
    fresh[idx][name] = v.to(params_[idx].device());
  }
  state_ = std::move(fresh);
  set_lr(lr);
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& m : state_)
    for (const auto& [name, t] : m)
      bytes += t.numel() * static_cast<std::int64_t>(element_size(t.dtype()));
  return bytes;
}

}  // namespace lockstep::optim
