// DataParallel's gather path, PyTorch's: forward() scatters the batch, runs the replicas and
// gathers their outputs under one autograd node, DataParallelBackward, whose backward runs every
// replica's backward and sums their gradients onto the wrapped module's parameters.
#include <optional>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/data_parallel.h"
#include "parallel/detail.h"
#include "parallel/replicas.h"

namespace lockstep::parallel {

using detail::clear_grads;

Tensor DataParallel::forward(const Tensor& input) {
  if (!input.defined() || input.dim() < 1)
    throw ShapeError("DataParallel: expected an input with a batch dimension, got " +
                     (input.defined() ? input.shape().str() : std::string("undefined")));
  check_master(GradMode::is_enabled());
  before_forward();
  const bool grad = GradMode::is_enabled();
  const bool input_grad = grad && input.requires_grad();
  const std::uint64_t step = is_training() ? step_++ : step_;
  const Plan pl = plan(input.size(0));
  std::vector<Tensor> outs(pl.pieces.size()), chunks(pl.pieces.size());
  // On GPUs the copies that read another GPU (the master's parameters, an input on a GPU) are
  // made on this thread before the workers start (see forward_backward_reducer).
  const bool copy_first = devices_.front().is_cuda();
  if (copy_first)
    for (std::size_t k = 0; k < pl.ranges.size(); ++k) {
      replicas_->copy_in(k);
      for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s)
        chunks[s] = replicas_->piece_of(input, pl.pieces[s].start, pl.pieces[s].size, k);
    }
  // Buffers (replicas.h): replica 0 updates the module's own, the others start from its values;
  // in deterministic mode the step keeps the first shard's update.
  replicas_->push_buffers(pl.ranges.size());
  std::optional<detail::ReplicaSet::ShardBuffers> shard_buffers;
  if (options_.deterministic) shard_buffers.emplace(*replicas_, pl.ranges.size());
  replicas_->run(pl.ranges.size(), [&](std::size_t k) {
    if (!copy_first) replicas_->copy_in(k);
    AutoGradMode grad_mode(grad);
    nn::Module& replica = *replicas_->module(k);
    clear_grads(replica);
    for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s) {
      const Shard& piece = pl.pieces[s];
      Tensor chunk = copy_first ? chunks[s] : replicas_->piece_of(input, piece.start, piece.size, k);
      if (input_grad) chunk = chunk.clone().requires_grad_(true);
      DropoutKeyGuard key({options_.seed, step, piece.start});
      if (shard_buffers) shard_buffers->before(k, s == 0);
      outs[s] = replica.forward(chunk);
      if (shard_buffers) shard_buffers->after(k, s == 0);
      if (!outs[s].defined() || outs[s].dim() < 1 || outs[s].size(0) != piece.size)
        throw ShapeError("forward returned " +
                         (outs[s].defined() ? outs[s].shape().str() : std::string("undefined")) +
                         " for a chunk of " + std::to_string(piece.size) +
                         " samples; DataParallel gathers outputs along dim 0");
      chunks[s] = chunk;
    }
  }, options_.deterministic);
  if (shard_buffers) shard_buffers->finish();
  bytes_moved_ = replicas_->parameter_copy_bytes(pl.ranges.size());
  std::vector<Tensor> gathered;
  for (auto& o : outs) gathered.push_back(o.detach().to(output_device_));
  Tensor out = gathered.size() == 1 ? gathered[0].clone() : cat(gathered, 0);
  bool any_param_grad = false;
  for (auto& p : master_.params) any_param_grad = any_param_grad || p.requires_grad();
  if (!grad || !(input_grad || any_param_grad)) return out;

  std::vector<Tensor> inputs{input};
  for (auto& p : master_.params) inputs.push_back(p);
  autograd::record(
      "DataParallelBackward", out, inputs,
      [this, alive = std::weak_ptr<char>(alive_), outs, chunks, pl, input_grad](const Tensor& g) {
        if (alive.expired())
          throw Error(
              "DataParallel: backward through an output of a DataParallel that was destroyed");
        // every replica's backward concurrently, piece by piece, gradients into slot rows
        const bool retain = autograd::retain_graph_requested();
        Tensor slots = zeros({static_cast<std::int64_t>(pl.pieces.size()), master_.numel},
                             master_.buffer.options());
        const std::vector<Tensor> blocks = row_blocks(slots, pl);
        std::vector<std::vector<char>> had(pl.pieces.size(),
                                           std::vector<char>(master_.params.size(), 0));
        // On GPUs the output gradient's pieces are copied to the replicas' devices here, before
        // the workers start (a worker's copy from the output device would wait for its stream).
        const bool copy_first = devices_.front().is_cuda();
        std::vector<Tensor> grads(pl.pieces.size());
        for (std::size_t k = 0; copy_first && k < pl.ranges.size(); ++k)
          for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s)
            if (outs[s].requires_grad())
              grads[s] = narrow(g, 0, pl.pieces[s].start, pl.pieces[s].size).to(devices_[k]);
        replicas_->run(pl.ranges.size(), [&](std::size_t k) {
          nn::Module& replica = *replicas_->module(k);
          for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s) {
            clear_grads(replica);
            const Shard& piece = pl.pieces[s];
            if (outs[s].requires_grad())
              outs[s].backward(copy_first
                                   ? grads[s].clone()
                                   : narrow(g, 0, piece.start, piece.size).to(devices_[k]).clone(),
                               retain);
            store_piece_grads(k, blocks[k], static_cast<std::int64_t>(s - pl.ranges[k].first),
                              had[s]);
          }
          clear_grads(replica);
        }, options_.deterministic);
        bytes_moved_ += gather_rows(slots, blocks, pl);  // rows computed on other GPUs
        std::vector<char> any = reduce_slots(slots, had);
        std::vector<Tensor> result;
        if (input_grad) {
          std::vector<Tensor> parts;
          for (std::size_t s = 0; s < chunks.size(); ++s) {
            Tensor cg = chunks[s].grad();
            parts.push_back((cg.defined() ? cg : zeros_like(chunks[s])).to(output_device_));
          }
          result.push_back(cat(parts, 0));
        } else {
          result.push_back(Tensor());
        }
        Tensor total = narrow(slots, 0, 0, 1).reshape({master_.numel});
        reduce_gather_grads(total, any);  // across ranks (DistributedDataParallel)
        for (std::size_t j = 0; j < master_.params.size(); ++j)
          result.push_back(any[j] ? master_.view_of(total, j).to(output_device_).clone()
                                  : Tensor());
        return result;
      });
  return out;
}

}  // namespace lockstep::parallel
