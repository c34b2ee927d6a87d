// DataParallel's one-device path: a DataParallel over one CPU device runs the wrapped module
// itself on the calling thread, as torch.nn.DataParallel does with one device
// (torch/nn/parallel/data_parallel.py: `if len(self.device_ids) == 1: return
// self.module(*inputs[0], **module_kwargs[0])`): no replica, no chunk copy, no gradient reducer
// (a group of one sums nothing); autograd leaves the gradients on the module's parameters,
// accumulated into a .grad they already hold, as a plain backward does.
#include <cmath>

#include "lockstep/parallel/data_parallel.h"
#include "parallel/replicas.h"

namespace lockstep::parallel {

bool DataParallel::one_device_path() const {
  // Not on GPUs (their flat optimizer step reads the gradients as views of one flat buffer, and
  // CUDA graph capture goes through the reducer path), not across ranks, not in deterministic
  // mode (its shards), not under no_sync() or while its gradients are pending (they live in the
  // local buffers, which the reducer path seeds).
  return devices_.size() == 1 && devices_.front().is_cpu() && !options_.process_group &&
         !options_.deterministic && require_sync_ && !local_pending_;
}

Tensor DataParallel::forward_backward_one_device(const nn::Args& inputs, const Tensor& target,
                                                 const ArgsLossFn& loss_fn,
                                                 const LossCount& count) {
  const std::int64_t batch = target.size(0);
  // The loss is the mean over the terms that count (targets not ignored); with none (or an empty
  // batch) the step's loss is NaN and no gradient is made, as on the reducer path.
  const double terms = piece_counts({{0, batch}}, target, count).front();
  const std::uint64_t step = step_++;
  double loss = std::nan("");
  if (batch > 0) {
    const nn::Args x = replicas_->piece_args(inputs, 0, batch, 0);
    const Tensor y = replicas_->piece_of(target, 0, batch, 0);  // on the device, as x
    replicas_->run(1, [&](std::size_t) {
      Tensor l =
          replicas_->train_module(x, y, {options_.seed, step, 0}, terms > 0 ? 1.0 : 0.0, loss_fn);
      if (terms > 0) loss = l.item();
    });
  }
  bytes_moved_ = 0;
  return scalar_tensor(loss, master_.buffer.options());
}

}  // namespace lockstep::parallel
