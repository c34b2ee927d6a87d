// DataParallel's reducer path (forward_backward without deterministic mode): each replica's loss
// on its own chunk, weighted by its share of the global batch, gradients bucketed and reduced by
// GradientReducer while backward runs; no_sync() accumulation.
#include <algorithm>
#include <cmath>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/data_parallel.h"
#include "parallel/detail.h"
#include "parallel/replicas.h"
#include "parallel/scatter_gather.h"

namespace lockstep::parallel {

using detail::normalized;
using detail::sum_of;

Tensor DataParallel::forward_backward_reducer(const nn::Args& inputs, const Tensor& target,
                                              const ArgsLossFn& loss_fn, const LossCount& count) {
  const std::int64_t batch = target.size(0);
  const std::size_t n = devices_.size();
  auto sizes = split_sizes(batch, static_cast<std::int64_t>(n));
  std::vector<std::int64_t> starts(n, 0);
  std::vector<Shard> pieces;
  for (std::size_t k = 0; k < n; ++k) {
    if (k > 0) starts[k] = starts[k - 1] + sizes[k - 1];
    pieces.push_back({starts[k], sizes[k]});
  }
  // Captured into a CUDA graph (parallel/cuda_graph_step.h): one GPU, one process, synced;
  // nothing read back on the host: the chunk's weight is 1 (its rows, not the count of targets
  // that are not ignored, which would be read from the device) and the loss stays on the device.
  const bool capturing =
      devices_.front().is_cuda() && cuda::is_current_stream_capturing(devices_.front().index);
  if (capturing) check_graph_capturable(batch);
  const std::vector<double> counts = piece_counts(pieces, target, capturing ? LossCount() : count);
  double total = sum_of(counts);
  // Across ranks (DistributedDataParallel's begin_step): the loss is weighted by the global
  // count, row i of this rank's batch is row row_offset + i of the global batch (dropout masks
  // are keyed by that global index), and a rank that joined follows the others' no_sync()
  // setting with an empty batch (under a module that runs collectives, one shaped like the last
  // batch it trained on, which begin_step remembers from `inputs` and `target`).
  const GlobalStep g = begin_step({static_cast<std::int64_t>(n), static_cast<std::int64_t>(total),
                                   batch, require_sync_, &inputs, &target});
  if (g.done) return scalar_tensor(std::nan(""), master_.buffer.options());
  total = g.count;
  const std::int64_t row_offset = g.row_offset;
  const bool sync = g.sync;
  const std::uint64_t step = step_++;
  const bool empty = total == 0;
  const std::vector<double> weights = normalized(counts, total);
  std::vector<double> losses(n, 0.0);
  std::vector<Tensor> device_losses(n);  // under capture: each replica's loss, on its device
  // The step's mean loss over the global batch (across ranks: end_step sums every rank's share,
  // so every rank returns the same value).
  auto mean_loss = [&]() {
    // One replica of weight 1: its loss tensor is the mean (what loss.item() · 1 gives eagerly).
    if (capturing) return device_losses[0].detach();
    const double mean = end_step(sum_of(losses));
    return scalar_tensor(empty ? std::nan("") : mean, master_.buffer.options());
  };
  // A replica without rows skips the step, but under a module that runs collectives: its group
  // spans every replica, so it runs on 0 rows (weight 0: ReplicaSet::train_on).
  const bool collectives = module_->runs_collectives();
  auto runs_piece = [&](std::size_t k) { return sizes[k] > 0 || collectives; };
  // On GPUs the copies that read another GPU (the master's parameters on cuda:0, a batch that
  // lives on a GPU) are made here, on this thread, before the workers start. Made by worker k,
  // such a copy waits for cuda:0's compute stream, which may by then be waiting for an NCCL
  // reduce that needs worker k's own share: a deadlock (a scheduling race on 2+ GPUs).
  const bool copy_first = devices_.front().is_cuda();
  std::vector<nn::Args> xs(n);
  std::vector<Tensor> ys(n);
  if (copy_first)
    for (std::size_t k = 0; k < n; ++k) {
      if (!runs_piece(k)) continue;
      replicas_->copy_in(k);
      xs[k] = replicas_->piece_args(inputs, starts[k], sizes[k], k);
      ys[k] = replicas_->piece_of(target, starts[k], sizes[k], k);
    }
  // Buffers (replicas.h): replica 0 updates the module's own, the others start from its values.
  replicas_->push_buffers(n);
  // Replica k's share of the step: refresh its parameters, forward and loss on its chunk,
  // backward of the weighted loss (its gradients land in its own flat gradient buffer).
  auto replica_step = [&](std::size_t k) {
    if (!copy_first) replicas_->copy_in(k);
    const nn::Args x = copy_first ? xs[k] : replicas_->piece_args(inputs, starts[k], sizes[k], k);
    Tensor y = copy_first ? ys[k] : replicas_->piece_of(target, starts[k], sizes[k], k);
    Tensor loss = replicas_->train_piece(k, x, y, {options_.seed, step, row_offset + starts[k]},
                                         weights[k], loss_fn);
    if (capturing)
      device_losses[k] = loss;
    else if (weights[k] > 0)
      losses[k] = loss.item() * weights[k];
  };
  if (!sync) {
    // no_sync(): forward and backward on every replica, nothing reduced. Replica gradients are
    // added into the local buffers only once every replica succeeded.
    replicas_->run(n, [&](std::size_t k) {
      replicas_->clear_grads(k);
      if (runs_piece(k)) replica_step(k);
    });
    if (local_grad_.empty()) {
      for (std::size_t k = 0; k < n; ++k) {
        local_grad_.push_back(zeros({master_.numel}, replicas_->flat(k).buffer.options()));
        local_has_.emplace_back(master_.params.size(), 0);
      }
    }
    replicas_->run(n, [&](std::size_t k) { accumulate_local(k); });
    local_pending_ = true;
    bytes_moved_ = replicas_->parameter_copy_bytes(n);
    return mean_loss();
  }
  const bool seed = local_pending_;
  // master_grad_ is replica 0's reducer buffer, which this step overwrites.
  renew_master_grad_if_held();
  replicas_->run(n, [&](std::size_t k) {
    reducers_[k]->prepare();
    if (seed) seed_from_local(k);
    // A replica that fails still takes part in every remaining collective (contributing zeros),
    // so the others finish their step instead of waiting for it; then its error is rethrown.
    // Under a module that runs collectives the others may be waiting in one of the module's
    // instead: the failing replica aborts the group (ReplicaSet::run) and every replica throws;
    // the failing one's started reductions are waited for after the abort
    // (ReplicaSet::set_on_abort).
    struct AbandonOnError {
      GradientReducer& r;
      bool abandons;
      bool done = false;
      ~AbandonOnError() {
        if (!done && abandons) try {
            r.abandon();
          } catch (...) {
          }
      }
    } guard{*reducers_[k], !collectives};
    if (runs_piece(k)) replica_step(k);
    guard.done = true;
    reducers_[k]->finalize();
  });
  bytes_moved_ = replicas_->parameter_copy_bytes(n);
  for (std::size_t k = 0; k < n; ++k) bytes_moved_ += reducers_[k]->bytes_reduced();
  std::vector<char> has(master_.params.size());
  for (std::size_t j = 0; j < has.size(); ++j) {
    has[j] = reducers_[0]->has_grad(j);
    // A parameter with pending no_sync() gradients but none in this call: its bucket was still
    // reduced (finalize reduces every bucket's whole range), the reducer just did not flag it.
    if (seed)
      for (std::size_t k = 0; k < n; ++k) has[j] = has[j] || local_has_[k][j];
  }
  accumulate_master_grads(reducers_[0]->flat_grad(), has);
  for (std::size_t k = 0; k < n; ++k) replicas_->clear_grads(k);
  if (seed) {
    NoGradGuard no_grad;
    for (std::size_t k = 0; k < n; ++k) {
      local_grad_[k].zero_();
      std::fill(local_has_[k].begin(), local_has_[k].end(), 0);
    }
    local_pending_ = false;
  }
  return mean_loss();
}

void DataParallel::check_graph_capturable(std::int64_t batch) const {
  std::string why;
  if (devices_.size() != 1)
    why = "it runs on " + std::to_string(devices_.size()) +
          " GPUs (the copies between them and the per-GPU streams are not captured; one GPU "
          "per process, or eager steps)";
  else if (options_.process_group)
    why = "it is a DistributedDataParallel (its step exchanges counts and losses on the host)";
  else if (!require_sync_ || local_pending_)
    why = "no_sync() gradient accumulation is in progress";
  else if (batch == 0)
    why = "the batch is empty";
  if (!why.empty())
    throw ValueError(
        "DataParallel::forward_backward under CUDA graph capture: not supported "
        "because " +
        why);
}

void DataParallel::accumulate_local(std::size_t k) {
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    Tensor g = replicas_->flat(k).params[j].grad();
    if (!g.defined()) continue;
    replicas_->flat(k).view_of(local_grad_[k], j).add_(g.to(devices_[k]));
    local_has_[k][j] = 1;
  }
  replicas_->clear_grads(k);
}

void DataParallel::seed_from_local(std::size_t k) {
  for (std::size_t j = 0; j < master_.params.size(); ++j)
    if (local_has_[k][j]) reducers_[k]->seed(j, replicas_->flat(k).view_of(local_grad_[k], j));
}

}  // namespace lockstep::parallel
