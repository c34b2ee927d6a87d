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

  // ---- sliced steps ----------------------------------------------------------------------------
  // An elementwise optimizer (each element's update reads and writes only that element of the
  // parameter, its gradient and its state tensors, with scalars fixed for the whole step) can run
  // one step as slices of its parameters on several threads: DataParallel::register_fused_optim
  // has each device's worker update the part of the flat parameter buffer whose gradient it has
  // just summed. step() of such an optimizer runs the same three parts on whole parameters, so a
  // sliced step is bit-identical to step() with the same gradients:
  //   begin_sliced_step(candidates)         one thread, before the slices
  //   update_slice(i, grad, lo, hi) ...     any threads, disjoint (parameter, range) pairs
  //   end_sliced_step(updated)              one thread, after every slice
  // Between begin and end the optimizer must not be used otherwise (step, set_lr, state_dict, ...).

  /// Whether this optimizer's step is elementwise and supports the calls below (SGD, Adam and
  /// AdamW do; the base default is false).
  virtual bool supports_sliced_step() const { return false; }
  /// Starts a sliced step. For each parameter i with candidates[i] != 0 (candidates has one entry
  /// per parameter), fixes what its update needs (whether its state exists yet, Adam's step
  /// number; the lr is read by each update) and gets its state tensors ready: state it does not
  /// have yet is created as zeros but held aside, not yet visible in state(). ValueError when
  /// supports_sliced_step() is false or candidates has the wrong size.
  void begin_sliced_step(const std::vector<char>& candidates);
  /// Updates elements [lo, hi) (flat, row-major) of candidate parameter i from `grad`, its
  /// gradient (same shape and dtype as the parameter; ShapeError / DTypeError otherwise;
  /// ValueError for a range outside [0, numel] or a parameter that is not a candidate of the
  /// current sliced step). Calls for disjoint element ranges may run concurrently.
  void update_slice(std::size_t i, const Tensor& grad, std::int64_t lo, std::int64_t hi);
  /// Ends the sliced step: each parameter with updated[i] != 0 must have had every element
  /// updated exactly once; it keeps the state its slices wrote (state created on its first step
  /// becomes visible, Adam's step count advances). Every other parameter is as if step() had
  /// skipped it (no gradient: no state created). ValueError without a sliced step in progress,
  /// for a wrong size or for a parameter marked updated that was not a candidate.
  void end_sliced_step(const std::vector<char>& updated);

 protected:
  /// Whether every parameter is on a CPU device now: the sliced step's update_range runs host
  /// loops over element ranges; a parameter on a GPU is updated by one fused launch over the
  /// whole parameter in step() instead.
  bool all_params_on_cpu() const;
  // The three parts of an elementwise step, implemented by optimizers whose
  // supports_sliced_step() is true: prepare_param (one thread) fixes parameter i's scalars and
  // state for this step, with new state held aside; update_range updates elements [lo, hi) (the
  // update formula, written once); commit_param makes the held-aside state part of the state.
  virtual void prepare_param(std::size_t i);
  virtual void update_range(std::size_t i, const Tensor& grad, std::int64_t lo, std::int64_t hi);
  virtual void commit_param(std::size_t i);
  /// step() of an elementwise optimizer: for every parameter with a gradient, prepare_param,
  /// update_range over all its elements, commit_param.
  void step_elementwise();

  /// State tensor `name` of parameter `index`, created as zeros like the parameter on first use.
  Tensor& state_or_zeros(std::size_t index, const std::string& name);
  bool has_state(std::size_t index, const std::string& name) const;
  void set_state(std::size_t index, const std::string& name, const Tensor& t);
  /// Names of the state tensors this optimizer keeps per parameter (for load validation).
  virtual std::vector<std::string> state_names() const = 0;

  std::vector<Tensor> params_;
  double lr_ = 0.0;
  std::vector<std::unordered_map<std::string, Tensor>> state_;

 private:
  // The sliced step in progress: whether one is, and its candidates.
  bool sliced_ = false;
  std::vector<char> candidates_;
};

}  // namespace lockstep::optim
