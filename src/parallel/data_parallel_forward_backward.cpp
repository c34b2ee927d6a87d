// DataParallel::forward_backward's entry points: argument checks and the choice of path (the
// reducer path, the one-device path or deterministic mode). The optimizer step is the caller's.
#include "lockstep/parallel/data_parallel.h"
#include "parallel/replicas.h"
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
  replicas_->follow_modes();
  return options_.deterministic ? forward_backward_deterministic(inputs, target, loss_fn, count)
         : one_device_path()    ? forward_backward_one_device(inputs, target, loss_fn, count)
                                : forward_backward_reducer(inputs, target, loss_fn, count);
}

}  // namespace lockstep::parallel
