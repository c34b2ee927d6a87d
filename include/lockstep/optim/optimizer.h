// Optimizer base (torch.optim.Optimizer) with one parameter group. A parameter whose gradient is
// none in a step is skipped entirely — no weight decay, no momentum, no state — and its state is
// created the first time it has a gradient, as in PyTorch. Parameters on cuda:k are updated on
// their device by fused kernels with the CPU loop's formulas and operation order (docs/cuda.md),
// and their state lives there too: when the parameters lie flat on one GPU (views of one storage,
// their gradients views of one other storage, as DataParallel lays them out) one launch updates
// them all, otherwise one launch per parameter does; both give the same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/core/state_dict.h"

namespace lockstep::cuda_ops {
struct FlatGraphTable;
}  // namespace lockstep::cuda_ops

namespace lockstep::optim {

namespace detail {
struct FlatPlan;
}  // namespace detail

/// How the last step() updated parameters on a GPU (see Optimizer::last_cuda_step()).
struct CudaStepInfo {
  /// One launch over the flat parameter buffer updated every parameter with a gradient.
  bool flat = false;
  /// Update kernels the step launched: 1 (or 0 when no parameter had a gradient with elements)
  /// when flat, else one per parameter with a gradient and elements. 0 on the CPU.
  std::int64_t launches = 0;
  /// Why the step was not flat (empty when it was, or when the parameters are on the CPU), e.g.
  /// "parameters 0 and 1 lie in different storages".
  std::string fallback_reason;
};

/// A parameter group, as one entry of torch.optim's param_groups: its parameters and the
/// settings in which it differs from the optimizer's (Adam and AdamW take groups; only the
/// weight decay may differ, as nanoGPT's configure_optimizers uses them:
/// lockstep/optim/configure_optimizers.h). The learning rate is the optimizer's for every group
/// (set_lr sets them all, as nanoGPT's loop `for g in optimizer.param_groups: g['lr'] = lr`).
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> weight_decay;  ///< unset: the optimizer's
};

class Optimizer {
 public:
  /// Throws ValueError for an empty parameter list, an undefined parameter, or a tensor listed
  /// twice (PyTorch refuses a parameter in two groups; tied weights, one tensor under two names,
  /// are listed once by nn::Module::parameters()). A parameter that does not require grad is
  /// accepted and, never having a gradient, never updated (as PyTorch).
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer();

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
  /// Virtual: parallel::ZeroRedundancyOptimizer gathers its ranks' shards into this format.
  virtual StateDict state_dict() const;
  /// Restores state_dict() output. Throws StateDictError for an unknown key, a parameter index
  /// out of range or a shape mismatch; nothing is modified when it throws.
  virtual void load_state_dict(const StateDict& state);
  /// Bytes of optimizer state this process holds (every state tensor's elements × element size;
  /// 0 before the first step). What ZeRO divides by the number of ranks (measured in
  /// tests/parallel/zero_test.cpp).
  virtual std::int64_t state_bytes() const;
  /// Names of the state tensors this optimizer keeps per parameter (SGD: momentum_buffer; Adam,
  /// AdamW: step, exp_avg, exp_avg_sq), as they appear in state_dict() keys.
  virtual std::vector<std::string> state_names() const = 0;

  /// The named state tensor of parameter `index` (undefined when not created yet). After a flat
  /// step on a GPU it is a view of the optimizer's flat state buffer; state that load_state_dict
  /// restored, or that a per-parameter step created, is moved into that buffer by the next flat
  /// step (so a tensor returned before then no longer is the state afterwards).
  Tensor state(std::size_t index, const std::string& name) const;

  /// How the last step() ran on a GPU: flat (one launch) or per parameter, the update kernels it
  /// launched and why it was not flat. Reset by every step(); all zero / empty on the CPU.
  const CudaStepInfo& last_cuda_step() const { return cuda_step_; }

  // ---- CUDA graphs (include/lockstep/cuda/graph.h, docs/cuda.md "CUDA graphs") ----------------
  // step() called while the parameters' device stream is captured records a launch that reads
  // the step's scalars (lr, Adam's per-parameter bias corrections, ...) and segment table from a
  // device buffer at a fixed address instead of kernel arguments, and changes no host state
  // (nothing ran yet): it needs the flat layout and existing state (an eager step first;
  // ValueError otherwise). Before each replay of such a graph, prepare_graph_replay() writes that
  // buffer for the step the replay makes — from the current lr and state, exactly as an eager
  // step() would compute them — and advances the host state the step changes (Adam's step
  // counts). Eager step() calls may be interleaved with replays: they use the same parameters
  // and state. This is PyTorch's Adam(capturable=True) with the step counts kept on the host.

  /// Stages the captured step for the next replay (see above). ValueError when no step was
  /// captured, or when this step's layout (which parameters have state) differs from the
  /// captured one; CudaError from the upload.
  void prepare_graph_replay();
  /// Whether a step was captured (and not forgotten by reset_graph_step()).
  bool has_graph_step() const;
  /// Forgets the captured step (the graph was reset); its device buffer is freed when the graph
  /// that kept it is reset.
  void reset_graph_step();

 protected:
  /// One update of parameter i from `grad`, its gradient (shaped like it, on its device), under
  /// no_grad: the optimizer's elementwise formula (include/lockstep/ops/detail/update_rules.h)
  /// over every element, its state created on the parameter's first step (DeviceError, nothing
  /// created, for a parameter on a GPU whose gradient is elsewhere). Implemented by SGD, Adam and
  /// AdamW; the base throws ValueError.
  virtual void update_param(std::size_t i, const Tensor& grad);
  /// step() of an elementwise optimizer: when the parameters are on a GPU and lie flat (see
  /// plan_flat_step in src/optim/flat_step.h) and supports_flat_step(), one step_flat(); else
  /// update_param for every parameter with a gradient. Records last_cuda_step().
  void step_elementwise();
  /// Whether step_flat is implemented (SGD, Adam, AdamW).
  virtual bool supports_flat_step() const { return false; }
  /// One step of every parameter by one launch over the flat layout `plan` (flat, every
  /// parameter and gradient on one CUDA device, one float dtype), bit-identical to the
  /// per-parameter step, with the same has-gradient rule. Returns the kernels launched.
  virtual std::int64_t step_flat(const detail::FlatPlan& plan);
  /// The flat state buffer `name` of `plan`'s layout (state_numel elements like the parameters,
  /// created as zeros on first use or when the layout changed), with every existing state tensor
  /// `name` moved into it: a state tensor that is not already its view there is copied in and
  /// replaced by the view. Values are unchanged.
  Tensor flat_state(const std::string& name, const detail::FlatPlan& plan);
  /// Parameter i's part of a flat state buffer, shaped like the parameter.
  Tensor flat_state_view(const Tensor& flat, const detail::FlatPlan& plan, std::size_t i) const;

  /// State tensor `name` of parameter `index`, created as zeros like the parameter on first use.
  Tensor& state_or_zeros(std::size_t index, const std::string& name);
  bool has_state(std::size_t index, const std::string& name) const;
  void set_state(std::size_t index, const std::string& name, const Tensor& t);
  /// The parameter index and state name of a `state.<index>.<name>` key holding `value`, checked
  /// as load_state_dict checks it (StateDictError naming the key otherwise).
  std::pair<std::size_t, std::string> parse_state_key(const std::string& key,
                                                      const Tensor& value) const;
  /// The learning rate of a `param_groups.0.lr` value (StateDictError unless a non-negative
  /// scalar).
  static double parse_lr(const Tensor& value);

  std::vector<Tensor> params_;
  double lr_ = 0.0;
  std::vector<std::unordered_map<std::string, Tensor>> state_;
  /// How step_flat runs: normally Eager; Capture while a CUDA graph records the step; Stage in
  /// prepare_graph_replay() (cuda_ops::FlatMode). graph_table_ is the captured step's table.
  enum class GraphMode : std::uint8_t { Eager, Capture, Stage };
  GraphMode graph_mode_ = GraphMode::Eager;
  /// graph_mode_ as the cuda_ops::FlatMode value (an int: cuda_ops is internal).
  int flat_mode_value() const { return static_cast<int>(graph_mode_); }
  std::shared_ptr<cuda_ops::FlatGraphTable> graph_table_;

 private:
  std::unique_ptr<detail::FlatPlan> graph_plan_;  // the captured step's layout
  // The flat layout of this step's parameters and gradients (flat == false, with the reason,
  // when they are not on one GPU or do not lie flat).
  detail::FlatPlan plan_flat() const;

  CudaStepInfo cuda_step_;
  // The flat state buffers (by state name) of the flat steps.
  std::unordered_map<std::string, Tensor> flat_state_;
};

}  // namespace lockstep::optim
