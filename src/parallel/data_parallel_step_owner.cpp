// DataParallel::forward_backward's entry points (argument checks, the choice of path: the
// reducer path, the one-device path or deterministic mode) and the one owner of the optimizer step
// (step_place).
#include "lockstep/parallel/data_parallel.h"
#include "parallel/scatter_gather.h"

namespace lockstep::parallel {

Tensor DataParallel::forward_backward(const Tensor& input, const Tensor& target,
                                      const nn::CrossEntropyLoss& loss) {
  const std::int64_t ignore = loss.ignore_index;
  return forward_backward(input, target, loss, [ignore](const Tensor& t) {
    std::int64_t n = 0;
    for (auto v : t.to_vector<std::int64_t>()) n += v != ignore;
    return n;
  });
}

Tensor DataParallel::forward_backward(const Tensor& input, const Tensor& target,
                                      const LossFn& loss_fn, const LossCount& count) {
  if (!input.defined() || !target.defined() || input.dim() < 1 || target.dim() < 1 ||
      input.size(0) != target.size(0))
    throw ShapeError("DataParallel::forward_backward: input " +
                     (input.defined() ? input.shape().str() : std::string("undefined")) +
                     " and target " +
                     (target.defined() ? target.shape().str() : std::string("undefined")) +
                     " must have the same batch dimension");
  return forward_backward(
      nn::Args{input}, target,
      [&loss_fn](const std::vector<Tensor>& outputs, const Tensor& y) {
        if (outputs.size() != 1)
          throw ShapeError("forward_args returned " + std::to_string(outputs.size()) +
                           " outputs; a loss of several outputs takes forward_backward(Args, "
                           "target, ArgsLossFn)");
        return loss_fn(outputs[0], y);
      },
      count);
}

Tensor DataParallel::forward_backward(const nn::Args& inputs, const Tensor& target,
                                      const ArgsLossFn& loss_fn, const LossCount& count) {
  const std::int64_t rows = detail::batch_rows(inputs, "DataParallel::forward_backward");
  if (!target.defined() || target.dim() < 1 || target.size(0) != rows)
    throw ShapeError("DataParallel::forward_backward: the inputs have " + std::to_string(rows) +
                     " rows but the target is " +
                     (target.defined() ? target.shape().str() : std::string("undefined")) +
                     "; they must have the same batch dimension");
  check_master(true);
  reduced_ = false;
  fused_done_ = false;
  Tensor loss = options_.deterministic
                    ? forward_backward_deterministic(inputs, target, loss_fn, count)
                : one_device_path() ? forward_backward_one_device(inputs, target, loss_fn, count)
                                    : forward_backward_reducer(inputs, target, loss_fn, count);
  // The fused optimizer's step where the workers did not make it (step_place): a call that
  // reduced into .grad (deterministic mode reduces inside no_sync() too, but makes no step there).
  if (reduced_ && !fused_done_ && step_place(local_pending_) != StepPlace::None) {
    // A copy: a hook may register another (it runs from the next step on).
    const auto hooks = step_pre_hooks_;
    std::shared_ptr<optim::Optimizer> optimizer = fused_;  // kept alive if a hook unregisters it
    for (const auto& hook : hooks) hook();
    optimizer->step();
  }
  return loss;
}

DataParallel::StepPlace DataParallel::step_place(bool seeded) const {
  if (!fused_ || !require_sync_ || joined()) return StepPlace::None;
  // On the workers only when the update uses exactly the reduced gradients: nothing seeded from
  // no_sync(), no .grad to accumulate into, one process on CPU devices (across ranks, replica 0
  // reduces with the other ranks after its siblings' reductions have returned; on GPUs step()
  // is one launch anyway), and no pre-step hook (it needs every gradient first).
  bool workers =
      !seeded && !options_.process_group && devices_.front().is_cpu() && step_pre_hooks_.empty();
  for (std::size_t j = 0; workers && j < master_.params.size(); ++j)
    workers = !master_.params[j].grad().defined();
  return workers ? StepPlace::Workers : StepPlace::End;
}

}  // namespace lockstep::parallel
