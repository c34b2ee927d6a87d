// nn::Module registries, state_dict, train/eval, to(), clone support.
#include "lockstep/nn/module.h"

#include <functional>
#include <set>
#include <sstream>

#include "lockstep/autograd/grad_mode.h"

namespace lockstep {
namespace nn {

Tensor Module::forward(const Tensor&) {
  throw Error(name() + ": forward() is not implemented for this module");
}

std::vector<Tensor> Module::forward_args(const Args& args) {
  if (args.size() == 1)
    if (const Tensor* t = tensor_arg(args.front())) return {forward(*t)};
  throw ValueError(name() + ": forward_args() got " + std::to_string(args.size()) +
                   " arguments; this module's forward takes one tensor (override forward_args "
                   "for several inputs or outputs)");
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  if (name.empty() || name.find('.') != std::string::npos)
    throw ValueError("register_parameter: invalid name '" + name + "'");
  if (t.defined() && requires_grad) t.requires_grad_(true);
  for (auto& [k, v] : params_)
    if (k == name) return v = t;
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  if (name.empty() || name.find('.') != std::string::npos)
    throw ValueError("register_buffer: invalid name '" + name + "'");
  for (auto& [k, v] : buffers_)
    if (k == name) return v = t;
  buffers_.emplace_back(name, t);
  return buffers_.back().second;
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> m) {
  if (name.empty() || name.find('.') != std::string::npos)
    throw ValueError("register_module: invalid name '" + name + "'");
  if (!m) throw ValueError("register_module: module '" + name + "' is null");
  for (auto& [k, v] : children_)
    if (k == name) {
      v = std::move(m);
      return;
    }
  children_.emplace_back(name, std::move(m));
}

void Module::clear_registrations() {
  params_.clear();
  buffers_.clear();
  children_.clear();
}

void Module::collect(const std::string& prefix, bool recurse, bool params,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [k, v] : params ? params_ : buffers_)
    if (v.defined()) out.emplace_back(prefix + k, v);
  if (recurse)
    for (const auto& [k, c] : children_) c->collect(prefix + k + ".", true, params, out);
}

namespace {
// PyTorch's remove_duplicate=True: a tensor registered under several names (tied weights) is
// kept under the first name met.
void remove_duplicates(std::vector<std::pair<std::string, Tensor>>& items) {
  std::set<const void*> seen;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < items.size(); ++i)
    if (seen.insert(items[i].second.impl_ptr().get()).second) {
      if (kept != i) items[kept] = std::move(items[i]);  // not onto itself: that empties it
      ++kept;
    }
  items.resize(kept);
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, true, out);
  remove_duplicates(out);
  return out;
}

void Module::tie_parameter(const std::string& name, const Tensor& shared) {
  for (auto& [k, v] : params_)
    if (k == name) {
      if (!shared.defined() || !v.defined() || shared.shape() != v.shape())
        throw ValueError(this->name() + ".tie_parameter('" + name + "'): the shared tensor has "
                         "shape " + (shared.defined() ? shared.shape().str() : "undefined") +
                         ", the parameter " + (v.defined() ? v.shape().str() : "undefined"));
      v = shared;
      return;
    }
  throw ValueError(this->name() + ".tie_parameter: no parameter named '" + name + "'");
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [k, v] : named_parameters(recurse)) out.push_back(v);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", recurse, false, out);
  remove_duplicates(out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [k, v] : named_buffers(recurse)) out.push_back(v);
  return out;
}

bool Module::runs_collectives() const {
  for (const auto& [name, child] : children_)
    if (child && child->runs_collectives()) return true;
  return false;
}

bool Module::uses_batch_statistics() const {
  for (const auto& [name, child] : children_)
    if (child && child->uses_batch_statistics()) return true;
  return false;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [k, c] : children_) out.push_back(c);
  return out;
}

StateDict Module::state_dict() const {
  StateDict sd;
  // PyTorch order: each module's parameters, then its buffers, then its children.
  std::vector<std::pair<std::string, Tensor>> items;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m,
                                                                     const std::string& p) {
    for (const auto& [k, v] : m.params_)
      if (v.defined()) sd.insert(p + k, v);
    for (const auto& [k, v] : m.buffers_)
      if (v.defined()) sd.insert(p + k, v);
    for (const auto& [k, c] : m.children_) walk(*c, p + k + ".");
  };
  walk(*this, "");
  return sd;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict mine = state_dict();
  std::vector<std::string> missing, unexpected;
  // A tied tensor (several keys, one tensor) is missing only when none of its keys is given.
  auto given = [&](const Tensor& t) {
    for (const auto& [k, v] : mine)
      if (v.is_same(t) && state.contains(k)) return true;
    return false;
  };
  for (const auto& [k, v] : mine)
    if (!state.contains(k) && !given(v)) missing.push_back(k);
  for (const auto& [k, v] : state)
    if (!mine.contains(k)) unexpected.push_back(k);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << "load_state_dict into " << name() << ":";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      os << ' ' << what << " key(s):";
      for (std::size_t i = 0; i < keys.size(); ++i) os << (i ? ", " : " ") << '\'' << keys[i] << '\'';
      os << ';';
    };
    list("missing", missing);
    list("unexpected", unexpected);
    throw StateDictError(os.str());
  }
  for (const auto& [k, v] : mine) {
    const Tensor* src = state.find(k);
    if (!src) continue;
    if (!src->defined() || src->shape() != v.shape())
      throw StateDictError("load_state_dict into " + name() + ": size mismatch for '" + k +
                           "': checkpoint has shape " +
                           (src->defined() ? src->shape().str() : std::string("undefined")) +
                           ", the model has " + v.shape().str());
  }
  NoGradGuard no_grad;
  for (const auto& [k, v] : mine)
    if (const Tensor* src = state.find(k)) {
      Tensor dst = v;
      dst.copy_(src->to(dst.device()));
    }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [k, c] : children_) c->train(on);
}

void Module::to(Device device) {
  check_device_available(device);
  NoGradGuard no_grad;
  for (auto& [k, v] : named_parameters()) {
    Tensor t = v;
    t.set_data(t.detach().to(device));
    if (t.grad().defined()) t.set_grad(t.grad().to(device));
  }
  for (auto& [k, v] : named_buffers()) {
    Tensor t = v;
    t.set_data(t.detach().to(device));
  }
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  for (auto& [k, v] : named_parameters()) {
    Tensor t = v;
    if (!is_floating(t.dtype())) continue;
    if (!is_floating(dtype))
      throw DTypeError("Module::to: parameter '" + k + "' cannot become " + to_string(dtype));
    t.set_data(t.detach().to(dtype));
    t.set_grad(Tensor());
  }
  for (auto& [k, v] : named_buffers()) {
    Tensor t = v;
    if (is_floating(t.dtype()) && is_floating(dtype)) t.set_data(t.detach().to(dtype));
  }
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.set_grad(Tensor());
}

std::shared_ptr<Module> Module::clone() const {
  throw Error(name() +
              ": clone() is not supported; derive the module from nn::Cloneable<T> and create "
              "its parameters and children in reset()");
}

void copy_module_state(const Module& src, Module& dst) {
  auto sp = src.named_parameters(), dp = dst.named_parameters();
  auto sb = src.named_buffers(), db = dst.named_buffers();
  if (sp.size() != dp.size() || sb.size() != db.size())
    throw Error(src.name() + ": clone() produced a different structure; reset() must register "
                "the same parameters, buffers and children as the original");
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < sp.size(); ++i) {
    Tensor d = dp[i].second;
    d.set_data(sp[i].second.detach().clone());
    d.impl().requires_grad = sp[i].second.requires_grad();
  }
  for (std::size_t i = 0; i < sb.size(); ++i) {
    Tensor d = db[i].second;
    d.set_data(sb[i].second.detach().clone());
  }
  std::function<void(const Module&, Module&)> flags = [&](const Module& s, Module& d) {
    d.train(s.is_training());
    d.copy_settings_from(s);
    auto sc = s.children(), dc = d.children();
    for (std::size_t i = 0; i < sc.size() && i < dc.size(); ++i) flags(*sc[i], *dc[i]);
  };
  flags(src, dst);
}

}  // namespace nn
}  // namespace lockstep
