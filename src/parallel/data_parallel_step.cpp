// DataParallel's training paths: the gather path (forward + DataParallelBackward), the reducer
// path (forward_backward) and deterministic mode.
#include <algorithm>
#include <cmath>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/autograd/node.h"
#include "lockstep/core/parallel.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/data_parallel.h"
#include "ops/cuda_ops.h"
#include "parallel/detail.h"

namespace lockstep::parallel {

using detail::clear_grads;
using detail::tree_sum;
using detail::tree_sum_columns;

// ---- pieces: the unit of work of both paths ------------------------------------------------
//
// A batch is cut into pieces, each processed by one device with its own forward/backward:
// normally one piece per device (tensor_split of the batch, empty pieces dropped); in
// deterministic mode shards of shard_size samples, contiguous ranges of them per device.
// Gradients of piece s land in row s of a [pieces, parameters] buffer; rows are summed by one
// fixed pairwise tree, so the result depends only on the pieces, not on who computed them.

DataParallel::Plan DataParallel::plan(std::int64_t batch) const {
  Plan p;
  if (options_.deterministic) {
    p.pieces = shards(batch);
    if (p.pieces.empty()) p.pieces.push_back({0, 0});
    p.ranges = shard_ranges(p.pieces.size());
    return p;
  }
  auto sizes = split_sizes(batch, static_cast<std::int64_t>(devices_.size()));
  std::int64_t start = 0;
  for (auto size : sizes) {
    if (size == 0 && !p.pieces.empty()) break;  // only min(B, N) replicas run (one if B == 0)
    p.ranges.emplace_back(p.pieces.size(), p.pieces.size() + 1);
    p.pieces.push_back({start, size});
    start += size;
  }
  return p;
}

void DataParallel::store_piece_grads(std::size_t k, const Tensor& rows, std::int64_t row,
                                     std::vector<char>& had) {
  Tensor dst = narrow(rows, 0, row, 1).reshape({master_.numel});
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    Tensor g = replica_flat_[k].params[j].grad();
    if (!g.defined()) continue;
    had[j] = 1;
    replica_flat_[k].view_of(dst, j).copy_(g.to(devices_[k]));
  }
}

std::vector<Tensor> DataParallel::row_blocks(const Tensor& slots, const Plan& pl) const {
  std::vector<Tensor> blocks;
  for (std::size_t k = 0; k < pl.ranges.size(); ++k) {
    const auto [first, last] = pl.ranges[k];
    const auto count = static_cast<std::int64_t>(last - first);
    const bool direct =
        slots.device() == devices_[k] || (slots.device().is_cpu() && devices_[k].is_cpu());
    blocks.push_back(direct ? narrow(slots, 0, static_cast<std::int64_t>(first), count)
                            : zeros({count, master_.numel}, slots.options().device(devices_[k])));
  }
  return blocks;
}

std::int64_t DataParallel::gather_rows(const Tensor& slots, const std::vector<Tensor>& blocks,
                                       const Plan& pl) const {
  NoGradGuard no_grad;
  std::int64_t bytes = 0;
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    if (blocks[k].device() == slots.device()) continue;  // written in place
    const auto first = static_cast<std::int64_t>(pl.ranges[k].first);
    narrow(slots, 0, first, blocks[k].size(0)).copy_(blocks[k]);  // between GPUs: a peer copy
    bytes += blocks[k].numel() * static_cast<std::int64_t>(element_size(blocks[k].dtype()));
  }
  return bytes;
}

std::vector<char> DataParallel::reduce_slots(const Tensor& slots,
                                             const std::vector<std::vector<char>>& had) {
  const std::int64_t width = master_.numel;
  const std::int64_t rows = slots.size(0);
  const auto n = static_cast<std::int64_t>(devices_.size());
  if (slots.device().is_cuda()) {
    // On a GPU: one launch on the slots' device, one thread per column, the same tree
    // (src/ops/tree_sum.h), so the bits equal the CPU's.
    cuda_ops::tree_sum_rows(slots);
  } else {
    run_on_workers(devices_.size(), [&](std::size_t k) {
      std::int64_t lo = width * static_cast<std::int64_t>(k) / n;
      std::int64_t hi = width * static_cast<std::int64_t>(k + 1) / n;
      if (slots.dtype() == kFloat64)
        tree_sum_columns(slots.data_ptr<double>(), rows, width, lo, hi);
      else
        tree_sum_columns(slots.data_ptr<float>(), rows, width, lo, hi);
    });
  }
  std::vector<char> any(master_.params.size(), 0);
  for (const auto& h : had)
    for (std::size_t j = 0; j < h.size(); ++j) any[j] = any[j] || h[j];
  return any;
}

// ---- the gather path -------------------------------------------------------------------------

Tensor DataParallel::forward(const Tensor& input) {
  if (!input.defined() || input.dim() < 1)
    throw ShapeError("DataParallel: expected an input with a batch dimension, got " +
                     (input.defined() ? input.shape().str() : std::string("undefined")));
  check_master(GradMode::is_enabled());
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
      sync_replica(k);
      for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s)
        chunks[s] =
            narrow(input.detach(), 0, pl.pieces[s].start, pl.pieces[s].size).to(devices_[k]);
    }
  run_on_workers(pl.ranges.size(), [&](std::size_t k) {
    if (!copy_first) sync_replica(k);
    if (options_.deterministic) set_num_threads(1);  // one BLAS call per GEMM on any N
    GradMode::set_enabled(grad);
    clear_grads(*replicas_[k]);
    for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s) {
      const Shard& piece = pl.pieces[s];
      Tensor chunk = copy_first
                         ? chunks[s]
                         : narrow(input.detach(), 0, piece.start, piece.size).to(devices_[k]);
      if (input_grad) chunk = chunk.clone().requires_grad_(true);
      DropoutKeyGuard key({options_.seed, step, piece.start});
      outs[s] = replicas_[k]->forward(chunk);
      if (!outs[s].defined() || outs[s].dim() < 1 || outs[s].size(0) != piece.size)
        throw ShapeError("forward returned " +
                         (outs[s].defined() ? outs[s].shape().str() : std::string("undefined")) +
                         " for a chunk of " + std::to_string(piece.size) +
                         " samples; DataParallel gathers outputs along dim 0");
      chunks[s] = chunk;
    }
  });
  bytes_moved_ = parameter_copy_bytes(pl.ranges.size());
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
        run_on_workers(pl.ranges.size(), [&](std::size_t k) {
          for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s) {
            clear_grads(*replicas_[k]);
            const Shard& piece = pl.pieces[s];
            if (outs[s].requires_grad())
              outs[s].backward(copy_first
                                   ? grads[s].clone()
                                   : narrow(g, 0, piece.start, piece.size).to(devices_[k]).clone(),
                               retain);
            store_piece_grads(k, blocks[k], static_cast<std::int64_t>(s - pl.ranges[k].first),
                              had[s]);
          }
          clear_grads(*replicas_[k]);
        });
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
        if (auto& group = options_.process_group) {
          // DistributedDataParallel's autograd path, PyTorch's semantics: the gradient is the
          // mean over ranks of each rank's gradient of its own loss.
          NoGradGuard no_grad;
          group->all_reduce(total, dist::ReduceOp::Sum);
          total.mul_(1.0 / group->size());
          std::vector<std::int64_t> flags(any.begin(), any.end());
          Tensor f = tensor(std::span<const std::int64_t>(flags));
          group->all_reduce(f, dist::ReduceOp::Max);
          auto agreed = f.to_vector<std::int64_t>();
          for (std::size_t j = 0; j < any.size(); ++j) any[j] = agreed[j] != 0;
        }
        for (std::size_t j = 0; j < master_.params.size(); ++j)
          result.push_back(any[j] ? master_.view_of(total, j).to(output_device_).clone()
                                  : Tensor());
        return result;
      });
  return out;
}

// ---- the reducer path ------------------------------------------------------------------------

std::vector<double> DataParallel::piece_counts(const std::vector<Shard>& pieces,
                                               const Tensor& target, const LossCount& count) const {
  std::vector<double> counts(pieces.size(), 0.0);
  for (std::size_t s = 0; s < pieces.size(); ++s) {
    if (pieces[s].size == 0) continue;
    counts[s] = count ? static_cast<double>(
                            count(narrow(target.detach(), 0, pieces[s].start, pieces[s].size)))
                      : static_cast<double>(pieces[s].size);
  }
  return counts;
}

namespace {

// count_s / total (all zero when nothing counts).
std::vector<double> normalized(std::vector<double> counts, double total) {
  for (double& c : counts) c = total > 0 ? c / total : 0.0;
  return counts;
}

double sum_of(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return t;
}

}  // namespace

DataParallel::StepTotals DataParallel::exchange_step(const RankStep& mine) {
  auto& group = *options_.process_group;
  const int world = group.size();
  const std::int64_t v[5] = {mine.pieces, mine.count, mine.active, mine.sync, mine.samples};
  Tensor in = tensor(std::span<const std::int64_t>(v, 5));
  std::vector<Tensor> out;
  for (int r = 0; r < world; ++r) out.push_back(zeros({5}, kInt64));
  group.all_gather(out, in);
  StepTotals t;
  std::vector<RankStep>& steps = t.ranks;
  int sync_on = 0, sync_off = 0;
  for (int r = 0; r < world; ++r) {
    auto v = out[static_cast<std::size_t>(r)].to_vector<std::int64_t>();
    const RankStep& st = steps.emplace_back(RankStep{v[0], v[1], v[2], v[3], v[4]});
    t.count += static_cast<double>(st.count);
    if (r < group.rank()) t.row_offset += st.samples;
    t.pieces += st.pieces;
    t.widest = std::max(t.widest, st.pieces);
    if (st.active && t.first_active < 0) {
      t.first_active = r;
      t.sync = st.sync != 0;
    }
    if (st.active) (st.sync ? sync_on : sync_off)++;
  }
  if (sync_on && sync_off) {
    std::string on, off;
    for (int r = 0; r < world; ++r) {
      const auto& st = steps[static_cast<std::size_t>(r)];
      if (!st.active) continue;
      std::string& list = st.sync ? on : off;
      if (!list.empty()) list += ",";
      list += std::to_string(r);
    }
    throw ValueError("DistributedDataParallel: ranks disagree on no_sync() in this step (ranks " +
                     off + " inside no_sync, ranks " + on +
                     " not): every rank must make the same synced and unsynced calls");
  }
  return t;
}

void DataParallel::backward_weighted(const Tensor& loss, double weight) const {
  if (loss.numel() != 1)
    throw ShapeError("loss function returned shape " + loss.shape().str() + ", expected a scalar");
  if (!loss.requires_grad()) {
    for (const auto& p : master_.params)
      if (p.requires_grad())
        throw AutogradError(
            "the loss does not require grad: loss_fn must build its result from "
            "the model's output");
    return;
  }
  mul(loss, weight).backward();
}

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
  check_master(true);
  reduced_ = false;
  fused_done_ = false;
  Tensor loss = options_.deterministic
                    ? forward_backward_deterministic(input, target, loss_fn, count)
                    : forward_backward_reducer(input, target, loss_fn, count);
  // The fused optimizer's step where the workers did not make it (see register_fused_optim): a
  // call that reduced into .grad, on a rank that has not joined, outside no_sync() (deterministic
  // mode reduces inside no_sync() too, but a call there still makes no step).
  if (fused_ && reduced_ && !fused_done_ && !joined_ && require_sync_) fused_->step();
  return loss;
}

Tensor DataParallel::forward_backward_reducer(const Tensor& input, const Tensor& target,
                                              const LossFn& loss_fn, const LossCount& count) {
  const std::int64_t batch = input.size(0);
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
  bool sync = require_sync_;
  dist::ProcessGroup* group = options_.process_group.get();
  // Across ranks, row i of this rank's batch is row row_offset + i of the global batch (the
  // ranks' batches in rank order): dropout masks are keyed by that global index.
  std::int64_t row_offset = 0;
  if (group) {
    // Across ranks: the loss is weighted by the global count, and a rank that joined follows
    // the others' no_sync() setting with an empty batch.
    const StepTotals t =
        exchange_step({static_cast<std::int64_t>(n), static_cast<std::int64_t>(total),
                       joined_ ? 0 : 1, require_sync_ ? 1 : 0, batch});
    if (t.first_active < 0) {
      all_joined_ = true;
      return scalar_tensor(std::nan(""), master_.buffer.options());
    }
    total = t.count;
    row_offset = t.row_offset;
    sync = t.sync;
    last_active_rank_ = t.first_active;
  }
  const std::uint64_t step = step_++;
  const bool empty = total == 0;
  const std::vector<double> weights = normalized(counts, total);
  std::vector<double> losses(n, 0.0);
  std::vector<Tensor> device_losses(n);  // under capture: each replica's loss, on its device
  // The step's mean loss over the global batch; across ranks each rank's share is gathered (in
  // rank order) so every rank returns the same value and knows every rank's share.
  auto mean_loss = [&]() {
    // One replica of weight 1: its loss tensor is the mean (what loss.item() · 1 gives eagerly).
    if (capturing) return device_losses[0].detach();
    double mine = sum_of(losses);
    if (group) {
      Tensor in = tensor(std::span<const double>(&mine, 1));
      std::vector<Tensor> out;
      for (int r = 0; r < group->size(); ++r) out.push_back(zeros({1}, kFloat64));
      group->all_gather(out, in);
      rank_losses_.clear();
      mine = 0;
      for (auto& t : out) {
        rank_losses_.push_back(t.item());
        mine += rank_losses_.back();
      }
    }
    return scalar_tensor(empty ? std::nan("") : mine, master_.buffer.options());
  };
  // On GPUs the copies that read another GPU (the master's parameters on cuda:0, a batch that
  // lives on a GPU) are made here, on this thread, before the workers start. Made by worker k,
  // such a copy waits for cuda:0's compute stream, which may by then be waiting for an NCCL
  // reduce that needs worker k's own share: a deadlock (a scheduling race on 2+ GPUs).
  const bool copy_first = devices_.front().is_cuda();
  std::vector<Tensor> xs(n), ys(n);
  if (copy_first)
    for (std::size_t k = 0; k < n; ++k) {
      if (weights[k] == 0) continue;
      sync_replica(k);
      xs[k] = narrow(input.detach(), 0, starts[k], sizes[k]).to(devices_[k]);
      ys[k] = narrow(target.detach(), 0, starts[k], sizes[k]).to(devices_[k]);
    }
  // Replica k's share of the step: refresh its parameters, forward and loss on its chunk,
  // backward of the weighted loss (its gradients land in its own flat gradient buffer).
  auto replica_step = [&](std::size_t k) {
    if (!copy_first) sync_replica(k);
    EnableGradGuard grad_on;
    Tensor x = copy_first ? xs[k] : narrow(input.detach(), 0, starts[k], sizes[k]).to(devices_[k]);
    Tensor y = copy_first ? ys[k] : narrow(target.detach(), 0, starts[k], sizes[k]).to(devices_[k]);
    DropoutKeyGuard key({options_.seed, step, row_offset + starts[k]});
    Tensor loss = loss_fn(replicas_[k]->forward(x), y);
    if (capturing)
      device_losses[k] = loss;
    else
      losses[k] = loss.item() * weights[k];
    backward_weighted(loss, weights[k]);
  };
  if (!sync) {
    // no_sync(): forward and backward on every replica, nothing reduced. Replica gradients are
    // added into the local buffers only once every replica succeeded.
    run_on_workers(n, [&](std::size_t k) {
      clear_grads(*replicas_[k]);
      if (weights[k] == 0) return;
      replica_step(k);
    });
    if (local_grad_.empty()) {
      for (std::size_t k = 0; k < n; ++k) {
        local_grad_.push_back(zeros({master_.numel}, replica_flat_[k].buffer.options()));
        local_has_.emplace_back(master_.params.size(), 0);
      }
    }
    run_on_workers(n, [&](std::size_t k) { accumulate_local(k); });
    local_pending_ = true;
    bytes_moved_ = parameter_copy_bytes(n);
    return mean_loss();
  }
  const bool seed = local_pending_;
  // The fused optimizer updates on the workers when its step uses exactly the reduced gradients:
  // nothing seeded, no .grad to accumulate into, one process (across ranks, replica 0 reduces
  // with the other ranks after its siblings' reductions have returned).
  bool sliced = fused_ && !seed && !group && devices_.front().is_cpu();
  for (std::size_t j = 0; sliced && j < master_.params.size(); ++j)
    sliced = !master_.params[j].grad().defined();
  // master_grad_ is replica 0's reducer buffer, which this step overwrites.
  renew_master_grad_if_held();
  std::vector<char> candidates;
  std::vector<Tensor> grad_views;  // master parameter j's gradient in replica 0's buffer
  if (sliced) {
    candidates.assign(fused_->params().size(), 0);
    for (std::size_t j = 0; j < master_.params.size(); ++j) {
      grad_views.push_back(master_.view_of(master_grad_, j));
      if (fused_index_[j] >= 0 && master_.params[j].requires_grad())
        candidates[static_cast<std::size_t>(fused_index_[j])] = 1;
    }
    fused_->begin_sliced_step(candidates);
  }
  // The reducers call the update from finalize() (see GradientReducer::set_update); it reads
  // grad_views, so it is cleared again when this call ends, also by an exception.
  for (std::size_t k = 0; k < n; ++k) {
    if (sliced)
      reducers_[k]->set_update([this, k, &grad_views](std::int64_t lo, std::int64_t hi) {
        fused_update(k, lo, hi, grad_views);
      });
    else
      reducers_[k]->set_update(nullptr);
  }
  // When the call throws, the sliced step also ends, with nothing updated (nothing was).
  struct ClearUpdates {
    std::vector<std::unique_ptr<GradientReducer>>& reducers;
    optim::Optimizer* sliced_step;  // null once ended (or when not sliced)
    ~ClearUpdates() {
      if (!sliced_step) return;
      for (auto& r : reducers) r->set_update(nullptr);
      try {
        sliced_step->end_sliced_step(std::vector<char>(sliced_step->params().size(), 0));
      } catch (...) {
      }
    }
  } clear_updates{reducers_, sliced ? fused_.get() : nullptr};
  run_on_workers(n, [&](std::size_t k) {
    reducers_[k]->prepare();
    if (seed) seed_from_local(k);
    // A replica that fails still takes part in every remaining collective (contributing zeros),
    // so the others finish their step instead of waiting for it; then its error is rethrown. It
    // counts as not completed, so no reducer applies the fused optimizer's update.
    struct AbandonOnError {
      GradientReducer& r;
      bool done = false;
      ~AbandonOnError() {
        if (!done) try {
            r.abandon();
          } catch (...) {
          }
      }
    } guard{*reducers_[k]};
    if (weights[k] > 0) replica_step(k);
    guard.done = true;
    reducers_[k]->finalize();  // with the fused optimizer: also its update (set_update above)
  });
  bytes_moved_ = parameter_copy_bytes(n);
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
  reduced_ = true;
  if (sliced) {
    std::vector<char> updated(candidates.size(), 0);
    for (std::size_t j = 0; j < has.size(); ++j)
      if (fused_index_[j] >= 0 && has[j])
        updated[static_cast<std::size_t>(fused_index_[j])] =
            candidates[static_cast<std::size_t>(fused_index_[j])];
    for (auto& r : reducers_) r->set_update(nullptr);
    clear_updates.sliced_step = nullptr;
    fused_->end_sliced_step(updated);
    fused_done_ = true;
  }
  for (std::size_t k = 0; k < n; ++k) clear_grads(*replicas_[k]);
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

void DataParallel::fused_update(std::size_t k, std::int64_t lo, std::int64_t hi,
                                const std::vector<Tensor>& grads) {
  const GradientReducer& reducer = *reducers_[k];
  const std::size_t nparams = master_.params.size();
  // The first parameter overlapping [lo, hi), then the following ones.
  std::size_t j = static_cast<std::size_t>(
      std::upper_bound(master_.offsets.begin(), master_.offsets.end(), lo) -
      master_.offsets.begin());
  j = j > 0 ? j - 1 : 0;
  for (; j < nparams && master_.offsets[j] < hi; ++j) {
    const int i = fused_index_[j];
    if (i < 0 || !reducer.has_grad(j)) continue;  // not optimized / no gradient on any replica
    const std::int64_t off = master_.offsets[j], numel = master_.shapes[j].numel();
    const std::int64_t a = std::max(lo, off) - off, e = std::min(hi, off + numel) - off;
    if (a < e) fused_->update_slice(static_cast<std::size_t>(i), grads[j], a, e);
  }
}

void DataParallel::accumulate_master_grads(const Tensor& flat_grad,
                                           const std::vector<char>& has_grad) {
  NoGradGuard no_grad;
  // The gather and deterministic paths copy into master_grad_ (the reducer path has already
  // written it, after the same check).
  if (flat_grad.device_raw_data() != master_grad_.device_raw_data()) renew_master_grad_if_held();
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    if (!has_grad[j]) continue;
    Tensor p = master_.params[j];
    Tensor src = master_.view_of(flat_grad, j).to(p.device());
    if (p.grad().defined()) {
      p.grad().add_(src);
    } else {
      Tensor dst = master_.view_of(master_grad_, j);
      if (dst.device_raw_data() != src.device_raw_data())
        dst.copy_(src);  // else the reducer path wrote it there
      p.set_grad(dst);
      handed_out_.push_back(dst.impl_ptr());
    }
  }
}

void DataParallel::renew_master_grad_if_held() {
  bool held = false;
  for (const auto& w : handed_out_) held = held || !w.expired();
  handed_out_.clear();
  if (!held) return;  // the usual loop: zero_grad() dropped them, the buffer is free
  reducers_.front()->renew_buffer();
  master_grad_ = reducers_.front()->flat_grad();
}

void DataParallel::accumulate_local(std::size_t k) {
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    Tensor g = replica_flat_[k].params[j].grad();
    if (!g.defined()) continue;
    replica_flat_[k].view_of(local_grad_[k], j).add_(g.to(devices_[k]));
    local_has_[k][j] = 1;
  }
  clear_grads(*replicas_[k]);
}

void DataParallel::seed_from_local(std::size_t k) {
  for (std::size_t j = 0; j < master_.params.size(); ++j)
    if (local_has_[k][j]) reducers_[k]->seed(j, replica_flat_[k].view_of(local_grad_[k], j));
}

// ---- deterministic mode ----------------------------------------------------------------------

Tensor DataParallel::forward_backward_deterministic(const Tensor& input, const Tensor& target,
                                                    const LossFn& loss_fn, const LossCount& count) {
  const std::int64_t batch = input.size(0);
  dist::ProcessGroup* group = options_.process_group.get();
  Plan pl = plan(batch);
  // Across ranks an empty local batch has no shards (alone it keeps one empty piece so the step
  // still produces a gradient-free result).
  if (group && batch == 0) {
    pl.pieces.clear();
    pl.ranges.clear();
  }
  const std::vector<double> counts = piece_counts(pl.pieces, target, count);
  double total = sum_of(counts);
  // Across ranks, this rank's shards follow those of the lower ranks in the global
  // [shards, parameters] buffer.
  std::int64_t all_pieces = static_cast<std::int64_t>(pl.pieces.size()), widest = 0;
  std::int64_t row_offset = 0;  // across ranks: this batch's first row in the global batch
  std::vector<RankStep> steps;
  if (group) {
    StepTotals t = exchange_step({static_cast<std::int64_t>(pl.pieces.size()),
                                  static_cast<std::int64_t>(total), joined_ ? 0 : 1, 1, batch});
    if (t.first_active < 0) {
      all_joined_ = true;
      return scalar_tensor(std::nan(""), master_.buffer.options());
    }
    total = t.count;
    row_offset = t.row_offset;
    all_pieces = t.pieces;
    widest = t.widest;
    last_active_rank_ = t.first_active;
    steps = std::move(t.ranks);
  }
  const std::uint64_t step = step_++;
  const bool empty = total == 0;
  const std::vector<double> weights = normalized(counts, total);
  const std::int64_t local = static_cast<std::int64_t>(pl.pieces.size());
  const std::size_t nparams = master_.params.size();
  // Row s of `slots` (on device_ids[0]) is shard s's gradient. Each worker writes its shards'
  // rows into its block (row_blocks: a view of `slots`, or on another GPU a buffer of its own,
  // copied into `slots` by gather_rows once every worker is done).
  Tensor slots = zeros({group ? std::max<std::int64_t>(widest, 1) : local, master_.numel},
                       master_.buffer.options());
  const std::vector<Tensor> blocks = row_blocks(slots, pl);
  std::vector<std::vector<char>> had(pl.pieces.size(), std::vector<char>(nparams, 0));
  std::vector<double> losses(pl.pieces.size(), 0.0);
  // On GPUs the copies that read another GPU (the master's parameters on device_ids[0], a batch
  // on a GPU) are made on this thread before the workers start, as the reducer path does.
  const bool copy_first = devices_.front().is_cuda();
  std::vector<Tensor> xs(pl.pieces.size()), ys(pl.pieces.size());
  if (copy_first)
    for (std::size_t k = 0; k < pl.ranges.size(); ++k) {
      sync_replica(k);
      for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s) {
        if (weights[s] == 0) continue;
        xs[s] = narrow(input.detach(), 0, pl.pieces[s].start, pl.pieces[s].size).to(devices_[k]);
        ys[s] = narrow(target.detach(), 0, pl.pieces[s].start, pl.pieces[s].size).to(devices_[k]);
      }
    }
  run_on_workers(pl.ranges.size(), [&](std::size_t k) {
    if (!copy_first) sync_replica(k);
    set_num_threads(1);  // one BLAS call per GEMM, the same on every device count
    EnableGradGuard grad_on;
    for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s) {
      const Shard& piece = pl.pieces[s];
      if (weights[s] == 0) continue;
      clear_grads(*replicas_[k]);
      Tensor x =
          copy_first ? xs[s] : narrow(input.detach(), 0, piece.start, piece.size).to(devices_[k]);
      Tensor y =
          copy_first ? ys[s] : narrow(target.detach(), 0, piece.start, piece.size).to(devices_[k]);
      DropoutKeyGuard key({options_.seed, step, row_offset + piece.start});
      Tensor loss = loss_fn(replicas_[k]->forward(x), y);
      losses[s] = loss.item() * weights[s];
      backward_weighted(loss, weights[s]);
      store_piece_grads(k, blocks[k], static_cast<std::int64_t>(s - pl.ranges[k].first), had[s]);
    }
    clear_grads(*replicas_[k]);
  });
  const std::int64_t row_bytes = gather_rows(slots, blocks, pl);
  // Bytes moved: parameters copied to the other local devices and the rows they computed copied
  // back (GPUs), plus shard rows gathered from (and sent to) the other ranks.
  const auto elem = static_cast<std::int64_t>(element_size(master_.buffer.dtype()));
  bytes_moved_ = parameter_copy_bytes(pl.ranges.size()) + row_bytes;
  if (group)
    bytes_moved_ += static_cast<std::int64_t>(group->size() - 1) *
                    std::max<std::int64_t>(widest, 1) * master_.numel * elem;
  if (!group) {
    std::vector<char> any = reduce_slots(slots, had);
    accumulate_master_grads(narrow(slots, 0, 0, 1).reshape({master_.numel}), any);
    reduced_ = true;
    return scalar_tensor(empty ? std::nan("") : tree_sum(losses), master_.buffer.options());
  }
  // Across ranks: gather every rank's shard rows, flags and losses into global shard order, then
  // the same fixed tree over all shards as one process would use (so the bits equal a single
  // process's with the same shards, on every rank).
  const int world = group->size();
  const std::int64_t rows = std::max<std::int64_t>(widest, 1);
  Tensor meta = zeros({rows, static_cast<std::int64_t>(nparams) + 1}, kFloat64);
  {
    double* m = meta.data_ptr<double>();
    for (std::int64_t s = 0; s < local; ++s) {
      for (std::size_t j = 0; j < nparams; ++j)
        m[s * (static_cast<std::int64_t>(nparams) + 1) + static_cast<std::int64_t>(j)] =
            had[static_cast<std::size_t>(s)][j];
      m[s * (static_cast<std::int64_t>(nparams) + 1) + static_cast<std::int64_t>(nparams)] =
          losses[static_cast<std::size_t>(s)];
    }
  }
  std::vector<Tensor> slot_parts, meta_parts;
  for (int r = 0; r < world; ++r) {
    slot_parts.push_back(zeros(slots.shape(), slots.options()));
    meta_parts.push_back(zeros(meta.shape(), kFloat64));
  }
  group->all_gather(slot_parts, slots);
  group->all_gather(meta_parts, meta);
  // The rows stay on the device they were gathered to (over NCCL on a GPU: device to device).
  Tensor global =
      zeros({std::max<std::int64_t>(all_pieces, 1), master_.numel}, master_.buffer.options());
  std::vector<std::vector<char>> global_had;
  std::vector<double> global_losses;
  std::int64_t row = 0;
  for (int r = 0; r < world; ++r) {
    const std::int64_t m = steps[static_cast<std::size_t>(r)].pieces;
    if (m == 0) continue;
    {
      NoGradGuard no_grad;
      narrow(global, 0, row, m).copy_(narrow(slot_parts[static_cast<std::size_t>(r)], 0, 0, m));
    }
    const double* md = meta_parts[static_cast<std::size_t>(r)].data_ptr<double>();
    for (std::int64_t s = 0; s < m; ++s) {
      std::vector<char> h(nparams);
      for (std::size_t j = 0; j < nparams; ++j)
        h[j] = md[s * (static_cast<std::int64_t>(nparams) + 1) + static_cast<std::int64_t>(j)] != 0;
      global_had.push_back(std::move(h));
      global_losses.push_back(
          md[s * (static_cast<std::int64_t>(nparams) + 1) + static_cast<std::int64_t>(nparams)]);
    }
    row += m;
  }
  std::vector<char> any = reduce_slots(global, global_had);
  accumulate_master_grads(narrow(global, 0, 0, 1).reshape({master_.numel}), any);
  reduced_ = true;
  rank_losses_.assign(static_cast<std::size_t>(world), 0.0);
  row = 0;
  for (int r = 0; r < world; ++r) {
    const std::int64_t m = steps[static_cast<std::size_t>(r)].pieces;
    for (std::int64_t s = 0; s < m; ++s)
      rank_losses_[static_cast<std::size_t>(r)] += global_losses[static_cast<std::size_t>(row + s)];
    row += m;
  }
  return scalar_tensor(empty ? std::nan("") : tree_sum(global_losses), master_.buffer.options());
}

}  // namespace lockstep::parallel
