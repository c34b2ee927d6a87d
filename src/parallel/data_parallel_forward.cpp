// DataParallel's gather path, PyTorch's: forward() / forward_args() scatter the batch (every
// tensor argument along dim 0, plain values to every replica), run the replicas and gather their
// outputs under one autograd node, DataParallelBackward, whose backward runs every replica's
// backward and sums their gradients onto the wrapped module's parameters.
#include <algorithm>
#include <optional>
#include <variant>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/data_parallel.h"
#include "parallel/detail.h"
#include "parallel/replicas.h"
#include "parallel/scatter_gather.h"
#include "lockstep/dist/detail/shard_group.h"

namespace lockstep::parallel {

Tensor DataParallel::forward(const Tensor& input) {
  if (!input.defined() || input.dim() < 1)
    throw ShapeError("DataParallel: expected an input with a batch dimension, got " +
                     (input.defined() ? input.shape().str() : std::string("undefined")));
  std::vector<Tensor> outs = forward_args({input});
  if (outs.size() != 1 || outs[0].dim() < 1)
    throw ShapeError("DataParallel::forward: the module returned " + std::to_string(outs.size()) +
                     " outputs" + (outs.size() == 1 ? " of shape " + outs[0].shape().str() : "") +
                     "; forward() gathers one batched output (use forward_args for several)");
  return outs[0];
}

std::vector<Tensor> DataParallel::forward_args(const nn::Args& args) {
  const std::int64_t batch = detail::batch_rows(args, "DataParallel::forward_args");
  const bool grad = GradMode::is_enabled();
  check_master(grad);
  replicas_->follow_modes();
  if (options_.deterministic) detail::refuse_batch_statistics(*replicas_->module(0));
  before_forward();
  // The tensor arguments (scattered along dim 0) and which of them need a gradient.
  std::vector<std::size_t> tensor_at;
  std::vector<char> wants;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (const Tensor* t = nn::tensor_arg(args[i])) {
      tensor_at.push_back(i);
      wants.push_back(grad && t->requires_grad());
    }
  const bool input_grad = std::find(wants.begin(), wants.end(), 1) != wants.end();
  const std::uint64_t step = is_training() ? step_++ : step_;
  const Plan pl = plan(batch);
  std::vector<std::vector<Tensor>> outs(pl.pieces.size());
  std::vector<nn::Args> chunks(pl.pieces.size());
  // On GPUs the copies that read another GPU (the master's parameters, an input on a GPU) are
  // made on this thread before the workers start (see forward_backward_reducer).
  const bool copy_first = devices_.front().is_cuda();
  if (copy_first)
    for (std::size_t k = 0; k < pl.ranges.size(); ++k) {
      replicas_->copy_in(k);
      for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s)
        chunks[s] = replicas_->piece_args(args, pl.pieces[s].start, pl.pieces[s].size, k);
    }
  // Buffers (replicas.h): replica 0 updates the module's own, the others start from its values;
  // in deterministic mode the step keeps the first shard's update.
  replicas_->push_buffers(pl.ranges.size());
  std::optional<detail::ReplicaSet::ShardBuffers> shard_buffers;
  if (options_.deterministic) shard_buffers.emplace(*replicas_, pl.ranges.size());
  // Piece s on slot j of device k (replica k itself but in deterministic mode's concurrent
  // shards, ReplicaSet::run_shards).
  auto forward_piece = [&](std::size_t k, std::size_t j, std::size_t s) {
    AutoGradMode grad_mode(grad);
    nn::Module& replica = replicas_->slot_module(k, j);
    replicas_->clear_grads(k, j);
    const Shard& piece = pl.pieces[s];
    nn::Args a = copy_first ? chunks[s] : replicas_->piece_args(args, piece.start, piece.size, k);
    for (std::size_t t = 0; t < tensor_at.size(); ++t)
      if (wants[t]) {
        Tensor& chunk = std::get<Tensor>(a[tensor_at[t]]);
        chunk = chunk.clone().requires_grad_(true);
      }
    DropoutKeyGuard key({options_.seed, step, piece.start});
    if (shard_buffers) shard_buffers->before(replica, k, s == 0);
    outs[s] = replica.forward_args(a);
    if (shard_buffers) shard_buffers->after(replica, s == 0);
    detail::check_piece_outputs(outs[s], outs[s], piece.size);
    chunks[s] = std::move(a);
  };
  // Deterministic mode: the shards' groups, kept for the backward's collectives.
  const bool concurrent = options_.deterministic && module_->runs_collectives();
  std::vector<std::shared_ptr<dist::ProcessGroup>> shard_groups;
  if (options_.deterministic) {
    std::vector<std::int64_t> rank_shards;
    auto ranks = forward_shard_ranks(static_cast<std::int64_t>(pl.pieces.size()), rank_shards);
    shard_groups = dist::detail::shard_groups(pl.pieces.size(), ranks, rank_shards, concurrent);
    replicas_->run_shards(
        pl.ranges, concurrent, shard_groups,
        [&](std::size_t k) {
          if (!copy_first) replicas_->copy_in(k);
        },
        forward_piece);
  } else {
    replicas_->run(pl.ranges.size(), [&](std::size_t k) {
      if (!copy_first) replicas_->copy_in(k);
      forward_piece(k, 0, pl.ranges[k].first);
    });
  }
  if (shard_buffers) shard_buffers->finish();
  for (std::size_t s = 1; s < outs.size(); ++s) detail::check_piece_outputs(outs[s], outs[0], -1);
  bytes_moved_ = replicas_->parameter_copy_bytes(pl.ranges.size());
  // Gathered on the output device: batched outputs along dim 0, 0-d ones as one value per piece.
  const std::size_t nout = outs[0].size();
  std::vector<Tensor> gathered;
  for (std::size_t i = 0; i < nout; ++i) {
    std::vector<Tensor> parts;
    for (auto& o : outs) {
      Tensor d = o[i].detach().to(output_device_);
      parts.push_back(o[i].dim() == 0 ? d.reshape({1}) : d);
    }
    gathered.push_back(parts.size() == 1 && outs[0][i].dim() > 0 ? parts[0].clone()
                                                                 : cat(parts, 0));
  }
  bool any_param_grad = false;
  for (auto& p : master_.params) any_param_grad = any_param_grad || p.requires_grad();
  if (!grad || !(input_grad || any_param_grad) || nout == 0) return gathered;

  // One autograd node, DataParallelBackward, over the differentiable outputs (floating point,
  // requiring grad on some replica; others, an int64 argmax say, are returned as gathered):
  // recorded on the one such output, or on those outputs packed into one flat tensor whose
  // slices are returned.
  std::vector<int> slot(nout, -1);  // output i's place among the packed ones
  std::vector<std::size_t> packed;
  for (std::size_t i = 0; i < nout; ++i) {
    bool needs = false;
    for (auto& o : outs) needs = needs || o[i].requires_grad();
    if (!needs || !is_floating(gathered[i].dtype())) continue;
    if (!packed.empty() && gathered[i].dtype() != gathered[packed[0]].dtype())
      throw DTypeError("DataParallel::forward_args: outputs " + std::to_string(packed[0]) + " (" +
                       to_string(gathered[packed[0]].dtype()) + ") and " + std::to_string(i) +
                       " (" + to_string(gathered[i].dtype()) +
                       ") both require grad; the outputs autograd flows through must share a "
                       "dtype");
    slot[i] = static_cast<int>(packed.size());
    packed.push_back(i);
  }
  if (packed.empty()) return gathered;
  std::vector<std::int64_t> offsets;
  Tensor out = gathered[packed[0]];
  if (packed.size() > 1) {
    std::vector<Tensor> flat;
    std::int64_t offset = 0;
    for (std::size_t i : packed) {
      offsets.push_back(offset);
      offset += gathered[i].numel();
      flat.push_back(gathered[i].reshape({gathered[i].numel()}));
    }
    out = cat(flat, 0);
  }
  std::vector<Shape> shapes;
  for (auto& g : gathered) shapes.push_back(g.shape());
  std::vector<Tensor> inputs;
  for (std::size_t i : tensor_at) inputs.push_back(std::get<Tensor>(args[i]));
  for (auto& p : master_.params) inputs.push_back(p);
  autograd::record(
      "DataParallelBackward", out, inputs,
      [this, alive = std::weak_ptr<char>(alive_), outs = std::move(outs),
       chunks = std::move(chunks), pl, tensor_at = std::move(tensor_at), wants = std::move(wants),
       offsets, slot, shapes, deterministic = options_.deterministic, concurrent,
       shard_groups](const Tensor& g) {
        if (alive.expired())
          throw Error(
              "DataParallel: backward through an output of a DataParallel that was destroyed");
        // Output i's gradient, then piece s's part of it.
        auto out_grad = [&](std::size_t i) {
          return offsets.empty()
                     ? g
                     : narrow(g, 0, offsets[static_cast<std::size_t>(slot[i])], shapes[i].numel())
                           .reshape(shapes[i]);
        };
        auto piece_grad = [&](std::size_t i, std::size_t s) {
          const Tensor gi = out_grad(i);
          return outs[s][i].dim() == 0
                     ? narrow(gi, 0, static_cast<std::int64_t>(s), 1).reshape(Shape{})
                     : narrow(gi, 0, pl.pieces[s].start, pl.pieces[s].size);
        };
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
        std::vector<std::vector<Tensor>> grads(pl.pieces.size());
        for (std::size_t k = 0; k < pl.ranges.size(); ++k)
          for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s)
            for (std::size_t i = 0; i < outs[s].size(); ++i)
              grads[s].push_back(slot[i] >= 0 && outs[s][i].requires_grad() && copy_first
                                     ? piece_grad(i, s).to(devices_[k])
                                     : Tensor());
        // Piece s's backward on the slot that ran its forward (its graph's parameters).
        auto backward_piece = [&](std::size_t k, std::size_t j, std::size_t s) {
          replicas_->clear_grads(k, j);
          std::vector<Tensor> roots, root_grads;
          for (std::size_t i = 0; i < outs[s].size(); ++i)
            if (slot[i] >= 0 && outs[s][i].requires_grad()) {
              roots.push_back(outs[s][i]);
              root_grads.push_back(copy_first ? grads[s][i].clone()
                                              : piece_grad(i, s).to(devices_[k]).clone());
            }
          detail::backward_roots(roots, root_grads, retain);
          store_piece_grads(replicas_->slot_flat(k, j), k, blocks[k],
                            static_cast<std::int64_t>(s - pl.ranges[k].first), had[s]);
          replicas_->clear_grads(k, j);
        };
        if (deterministic)
          replicas_->run_shards(
              pl.ranges, concurrent, shard_groups, [](std::size_t) {}, backward_piece);
        else
          replicas_->run(pl.ranges.size(),
                         [&](std::size_t k) { backward_piece(k, 0, pl.ranges[k].first); });
        bytes_moved_ += gather_rows(slots, blocks, pl);  // rows computed on other GPUs
        std::vector<char> any = reduce_slots(slots, had);
        std::vector<Tensor> result;
        for (std::size_t t = 0; t < tensor_at.size(); ++t) {
          if (!wants[t]) {
            result.push_back(Tensor());
            continue;
          }
          std::vector<Tensor> parts;
          for (std::size_t s = 0; s < chunks.size(); ++s) {
            const Tensor& chunk = std::get<Tensor>(chunks[s][tensor_at[t]]);
            Tensor cg = chunk.grad();
            parts.push_back((cg.defined() ? cg : zeros_like(chunk)).to(output_device_));
          }
          result.push_back(cat(parts, 0));
        }
        Tensor total = narrow(slots, 0, 0, 1).reshape({master_.numel});
        reduce_gather_grads(total, any);  // across ranks (DistributedDataParallel)
        for (std::size_t j = 0; j < master_.params.size(); ++j)
          result.push_back(any[j] ? master_.view_of(total, j).to(output_device_).clone()
                                  : Tensor());
        return result;
      });
  if (packed.size() == 1) {
    gathered[packed[0]] = out;
  } else {
    for (std::size_t j = 0; j < packed.size(); ++j)
      gathered[packed[j]] =
          narrow(out, 0, offsets[j], shapes[packed[j]].numel()).reshape(shapes[packed[j]]);
  }
  return gathered;
}

}  // namespace lockstep::parallel
