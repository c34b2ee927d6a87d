// Optimizer base (torch.optim.Optimizer) with one parameter group. A parameter whose gradient is
// none in a step is skipped entirely — no weight decay, no momentum, no state — and its state is
// created the first time it has a gradient, as in PyTorch. Parameters on cuda:k are updated on
// their device by fused kernels (one launch per parameter, same formulas and operation order as
// the CPU loop; docs/cuda.md), and their state lives there too.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/nn/state_dict.h"

namespace lockstep::optim {

class Optimizer {
 public:
  /// Throws ValueError for an empty parameter list or an undefined parameter. A parameter that
  /// does not require grad is accepted and, never having a gradient, never updated (as PyTorch).
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;

  /// One update from the parameters' current gradients (under no_grad).
  virtual void step() = 0;
  /// Sets every gradient to none (set_to_none = true, PyTorch 2.x default) or to zero.
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  /// Changes the learning rate (what LR schedulers call). ValueError for lr < 0.
  void set_lr(double lr);
  const std::vector<Tensor>& params() const { return params_; }

  /// Per-parameter state under `state.<index>.<name>` (index in parameter order, as PyTorch's
  /// optimizer state_dict) plus `param_groups.0.lr`; scalars are 0-d float64 tensors. Values are
  /// copies; the state of a cuda:k parameter (kept on that device) is copied to the host (cpu:0).
  StateDict state_dict() const;
  /// Restores state_dict() output. Throws StateDictError for an unknown key, a parameter index
  /// out of range or a shape mismatch; nothing is modified when it throws.
  void load_state_dict(const StateDict& state);

  /// The named state tensor of parameter `index` (undefined when not created yet).
  Tensor state(std::size_t index, const std::string& name) const;

 protected:
  /// State tensor `name` of parameter `index`, created as zeros like the parameter on first use.
  Tensor& state_or_zeros(std::size_t index, const std::string& name);
  bool has_state(std::size_t index, const std::string& name) const;
  void set_state(std::size_t index, const std::string& name, const Tensor& t);
  /// Names of the state tensors this optimizer keeps per parameter (for load validation).
  virtual std::vector<std::string> state_names() const = 0;

  std::vector<Tensor> params_;
  double lr_ = 0.0;
  std::vector<std::unordered_map<std::string, Tensor>> state_;
};

}  // namespace lockstep::optim
