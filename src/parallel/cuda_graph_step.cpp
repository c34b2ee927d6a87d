// CUDAGraphStep and its host policy (include/lockstep/parallel/cuda_graph_step.h).
#include "lockstep/parallel/cuda_graph_step.h"

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/autocast.h"
#include "lockstep/ops/ops.h"

namespace lockstep::parallel {

// ---- GraphStepPlanner --------------------------------------------------------------------------

GraphStepPlanner::GraphStepPlanner(int warmup_steps) : warmup_(warmup_steps) {
  if (warmup_steps < 1)
    throw ValueError(
        "CUDA graph step: warmup_steps must be at least 1 (the optimizer's state "
        "must exist before the capture), got " +
        std::to_string(warmup_steps));
}

GraphStepAction GraphStepPlanner::next(const Shape& input, const Shape& target) {
  // Before the capture a batch with more rows than the static shapes replaces them (a run that
  // starts, e.g. resumed, at an epoch's last partial batch captures the full batches, not it).
  const auto rows = [](const Shape& s) { return s.size() > 0 ? s[0] : 0; };
  if (!shapes_ || (!captured_ && rows(input) > rows(shapes_->first))) {
    shapes_.emplace(input, target);
    warmed_ = 0;
  }
  if (input != shapes_->first || target != shapes_->second) return GraphStepAction::Eager;
  if (captured_) return GraphStepAction::Replay;
  if (warmed_ < warmup_) {
    ++warmed_;
    return GraphStepAction::Warmup;
  }
  captured_ = true;
  return GraphStepAction::Capture;
}

void GraphStepPlanner::reset() {
  warmed_ = 0;
  captured_ = false;
}

// ---- CUDAGraphStep -----------------------------------------------------------------------------

CUDAGraphStep::CUDAGraphStep(DataParallel& dp, std::shared_ptr<optim::Optimizer> optimizer,
                             CUDAGraphStepOptions options)
    : dp_(dp),
      optimizer_(std::move(optimizer)),
      options_(options),
      loss_(options.ignore_index),
      planner_(options.warmup_steps),
      device_(dp.device_ids().front()) {
  const auto& devices = dp.device_ids();
  const std::string prefix = "CUDA graphs: ";
  if (devices.size() != 1 || !devices.front().is_cuda())
    throw ValueError(prefix + "the step must run on exactly one GPU (DataParallel on " +
                     device_list(devices) +
                     "); DataParallel over several GPUs in one process and CPU devices are not "
                     "captured");
  if (dp.options().process_group)
    throw ValueError(prefix +
                     "DistributedDataParallel is not captured (its step exchanges counts and "
                     "losses on the host); train without CUDA graphs");
  if (dp.options().deterministic) throw ValueError(prefix + "deterministic mode is not captured");
  if (!optimizer_) throw ValueError(prefix + "null optimizer");
}

CUDAGraphStep::~CUDAGraphStep() {
  try {
    reset();
  } catch (...) {
  }
}

void CUDAGraphStep::reset() {
  unchecked_ = false;
  graph_.reset();
  if (optimizer_) optimizer_->reset_graph_step();
  static_input_ = Tensor();
  static_target_ = Tensor();
  static_loss_ = Tensor();
  captured_grads_.clear();
  planner_.reset();
}

double CUDAGraphStep::step(const Tensor& input, const Tensor& target) {
  check();  // a step_async replay not checked yet
  const Tensor loss = step_async(input, target);
  check();
  return loss.item();
}

Tensor CUDAGraphStep::step_async(const Tensor& input, const Tensor& target) {
  if (is_autocast_enabled())
    throw ValueError(
        "CUDA graphs: a step under autocast (--precision bf16) is not captured in this slice; "
        "train in fp32 or without CUDA graphs");
  if (!input.defined() || !target.defined())
    throw ShapeError("CUDA graph step: undefined input or target");
  const GraphStepAction action = planner_.next(input.shape(), target.shape());
  last_ = action;
  switch (action) {
    case GraphStepAction::Eager:
    case GraphStepAction::Warmup:
      return eager(input, target);
    case GraphStepAction::Capture:
      capture(input, target);
      return replay(input, target);
    case GraphStepAction::Replay:
      return replay(input, target);
  }
  return Tensor();
}

void CUDAGraphStep::check() {
  if (!unchecked_) return;
  unchecked_ = false;
  graph_.check_replay();  // waits; an out-of-range target throws cross_entropy's IndexError
}

Tensor CUDAGraphStep::eager(const Tensor& input, const Tensor& target) {
  optimizer_->zero_grad();
  Tensor loss = dp_.forward_backward(input, target, loss_);
  optimizer_->step();
  return loss;
}

void CUDAGraphStep::capture(const Tensor& input, const Tensor& target) {
  // Static inputs at fixed addresses (the graph reads them), filled before each replay.
  static_input_ = empty(input.shape(), input.options().device(device_).requires_grad(false));
  static_target_ = empty(target.shape(), target.options().device(device_).requires_grad(false));
  captured_grads_.clear();
  optimizer_->zero_grad();
  const std::uint64_t dp_step = dp_.step_count();
  graph_.capture_begin(device_.index);
  try {
    static_loss_ = dp_.forward_backward(static_input_, static_target_, loss_);
    optimizer_->step();  // captured: the flat step's launch (Optimizer::prepare_graph_replay)
    graph_.capture_end();
  } catch (...) {
    graph_.abort_capture();
    optimizer_->reset_graph_step();
    static_loss_ = Tensor();
    dp_.set_step_count(dp_step);
    planner_.reset();
    throw;
  }
  // Nothing ran during the capture: the step counter advances with each replay instead.
  dp_.set_step_count(dp_step);
  for (const Tensor& p : dp_.parameters()) captured_grads_.push_back(p.grad());
}

Tensor CUDAGraphStep::replay(const Tensor& input, const Tensor& target) {
  {
    NoGradGuard no_grad;
    static_input_.copy_(input.detach());
    static_target_.copy_(target.detach());
  }
  optimizer_->prepare_graph_replay();
  graph_.replay();
  ++replays_;
  unchecked_ = true;
  // The host state an eager step leaves: the step counter and the parameters' .grad (the
  // reduced gradients the graph wrote).
  dp_.set_step_count(dp_.step_count() + 1);
  const std::vector<Tensor> params = dp_.parameters();
  for (std::size_t j = 0; j < params.size() && j < captured_grads_.size(); ++j) {
    Tensor p = params[j];
    p.set_grad(captured_grads_[j]);
  }
  return static_loss_;
}

}  // namespace lockstep::parallel
