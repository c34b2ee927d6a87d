// DataParallel's deterministic mode (route (a), docs/design.md): the global batch is cut into
// shards of shard_size samples fixed by B alone; each shard's forward/backward runs on its own,
// single-threaded, and writes its gradient into row s of a [shards, parameters] buffer; the rows
// are summed by one fixed pairwise tree over shard indices (include/lockstep/ops/detail/tree_sum.h). Across
// ranks DistributedDataParallel's gather_shards puts every rank's rows in global shard order
// first, so the bits equal one process's with the same shards.
#include <cmath>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/data_parallel.h"
#include "parallel/detail.h"
#include "parallel/replicas.h"
#include "lockstep/dist/detail/shard_group.h"

namespace lockstep::parallel {

using detail::normalized;
using detail::sum_of;
using detail::tree_sum;

namespace detail {

namespace {
// The deepest layer under `m` (dotted path `at`) whose forward mixes its batch's samples without
// a collective that spans the shards; empty when none.
std::string batch_statistics_layer(const nn::Module& m, const std::string& at) {
  for (const auto& [name, child] : m.named_children()) {
    if (!child) continue;
    const std::string found = batch_statistics_layer(*child, at.empty() ? name : at + "." + name);
    if (!found.empty()) return found;
  }
  if (m.uses_batch_statistics() && !m.runs_collectives())
    return "'" + (at.empty() ? std::string("(the wrapped module)") : at) + "' (" + m.name() + ")";
  return "";
}
}  // namespace

void refuse_batch_statistics(const nn::Module& m) {
  const std::string layer = batch_statistics_layer(m, "");
  if (!layer.empty())
    throw ValueError(
        "DataParallel deterministic mode: layer " + layer +
        " normalizes each shard with that shard's own batch statistics in training, so the "
        "result would depend on the shard size rather than being the one-device result it "
        "promises; the fix is SyncBatchNorm (statistics over the whole global batch): call "
        "nn::convert_sync_batchnorm(model) before wrapping it (the CLI: --sync-bn), turn "
        "deterministic mode off, or put the layer in eval()");
}

}  // namespace detail

Tensor DataParallel::forward_backward_deterministic(const nn::Args& inputs, const Tensor& target,
                                                    const ArgsLossFn& loss_fn,
                                                    const LossCount& count) {
  detail::refuse_batch_statistics(*replicas_->module(0));
  const std::int64_t batch = target.size(0);
  const bool across_ranks = options_.process_group != nullptr;
  Plan pl = plan(batch);
  // Across ranks an empty local batch has no shards (alone it keeps one empty piece so the step
  // still produces a gradient-free result).
  if (across_ranks && batch == 0) {
    pl.pieces.clear();
    pl.ranges.clear();
  }
  const std::vector<double> counts = piece_counts(pl.pieces, target, count);
  // Every call reduces (no_sync() is a documented no-op here).
  const GlobalStep g = begin_step({static_cast<std::int64_t>(pl.pieces.size()),
                                   static_cast<std::int64_t>(sum_of(counts)), batch, true});
  if (g.done) return scalar_tensor(std::nan(""), master_.buffer.options());
  std::int64_t widest = 0;
  for (auto m : g.rank_pieces) widest = std::max(widest, m);
  const std::uint64_t step = step_++;
  const bool empty = g.count == 0;
  const std::vector<double> weights = normalized(counts, g.count);
  const std::size_t nparams = master_.params.size();
  // Row s of `slots` (on device_ids[0]) is shard s's gradient (across ranks padded to the widest
  // rank). Each worker writes its shards' rows into its block (row_blocks: a view of `slots`, or
  // on another GPU a buffer of its own, copied into `slots` by gather_rows once every worker is
  // done).
  Tensor slots =
      zeros({std::max<std::int64_t>(widest, 1), master_.numel}, master_.buffer.options());
  const std::vector<Tensor> blocks = row_blocks(slots, pl);
  std::vector<std::vector<char>> had(pl.pieces.size(), std::vector<char>(nparams, 0));
  std::vector<double> losses(pl.pieces.size(), 0.0);
  // On GPUs the copies that read another GPU (the master's parameters on device_ids[0], a batch
  // on a GPU) are made on this thread before the workers start, as the reducer path does.
  const bool copy_first = devices_.front().is_cuda();
  std::vector<nn::Args> xs(pl.pieces.size());
  std::vector<Tensor> ys(pl.pieces.size());
  if (copy_first)
    for (std::size_t k = 0; k < pl.ranges.size(); ++k) {
      replicas_->copy_in(k);
      for (std::size_t s = pl.ranges[k].first; s < pl.ranges[k].second; ++s) {
        if (pl.pieces[s].size == 0) continue;
        xs[s] = replicas_->piece_args(inputs, pl.pieces[s].start, pl.pieces[s].size, k);
        ys[s] = replicas_->piece_of(target, pl.pieces[s].start, pl.pieces[s].size, k);
      }
    }
  // Buffers: one update per step, the one this process's first shard makes (replicas.h).
  replicas_->push_buffers(pl.ranges.size());
  detail::ReplicaSet::ShardBuffers shard_buffers(*replicas_, pl.ranges.size());
  // dist::current_group() of shard s: the step's shards in global order (shard_group.h); a
  // module that runs collectives has its shards run at once.
  const bool concurrent = module_->runs_collectives();
  const auto groups =
      dist::detail::shard_groups(pl.pieces.size(), options_.process_group, g.rank_pieces, concurrent);
  replicas_->run_shards(
      pl.ranges, concurrent, groups,
      [&](std::size_t k) {
        if (!copy_first) replicas_->copy_in(k);
      },
      [&](std::size_t k, std::size_t j, std::size_t s) {
        const Shard& piece = pl.pieces[s];
        if (piece.size == 0) return;
        replicas_->clear_grads(k, j);
        const nn::Args x =
            copy_first ? xs[s] : replicas_->piece_args(inputs, piece.start, piece.size, k);
        Tensor y = copy_first ? ys[s] : replicas_->piece_of(target, piece.start, piece.size, k);
        nn::Module& m = replicas_->slot_module(k, j);
        shard_buffers.before(m, k, s == 0);
        Tensor loss = replicas_->train_piece(
            k, x, y, {options_.seed, step, g.row_offset + piece.start}, weights[s], loss_fn, j);
        shard_buffers.after(m, s == 0);
        if (weights[s] > 0) losses[s] = loss.item() * weights[s];
        store_piece_grads(replicas_->slot_flat(k, j), k, blocks[k],
                          static_cast<std::int64_t>(s - pl.ranges[k].first), had[s]);
        replicas_->clear_grads(k, j);
      });
  shard_buffers.finish();
  // Bytes moved: parameters copied to the other local devices and the rows they computed copied
  // back (GPUs); gather_shards adds what crosses ranks.
  bytes_moved_ = replicas_->parameter_copy_bytes(pl.ranges.size()) + gather_rows(slots, blocks, pl);
  ShardRows all = gather_shards({slots, std::move(had), std::move(losses)}, g);
  std::vector<char> any = reduce_slots(all.rows, all.had);
  accumulate_master_grads(narrow(all.rows, 0, 0, 1).reshape({master_.numel}), any);
  return scalar_tensor(empty ? std::nan("") : tree_sum(all.losses), master_.buffer.options());
}

}  // namespace lockstep::parallel
