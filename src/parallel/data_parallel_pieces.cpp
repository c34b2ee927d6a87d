// DataParallel's pieces, the unit of work of every training path.
//
// A batch is cut into pieces, each processed by one device with its own forward/backward:
// normally one piece per device (tensor_split of the batch, empty pieces dropped); in
// deterministic mode shards of shard_size samples, contiguous ranges of them per device.
// Gradients of piece s land in row s of a [pieces, parameters] buffer; rows are summed by one
// fixed pairwise tree, so the result depends only on the pieces, not on who computed them.
#include <algorithm>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/parallel/data_parallel.h"
#include "lockstep/ops/detail/cuda_steps.h"
#include "parallel/detail.h"
#include "parallel/replicas.h"

namespace lockstep::parallel {

std::vector<DataParallel::Shard> DataParallel::shards(std::int64_t batch) const {
  std::vector<Shard> out;
  for (std::int64_t s = 0; s < batch; s += options_.shard_size)
    out.push_back({s, std::min(options_.shard_size, batch - s)});
  return out;
}

std::vector<std::pair<std::size_t, std::size_t>> DataParallel::shard_ranges(
    std::size_t nshards) const {
  auto sizes =
      split_sizes(static_cast<std::int64_t>(nshards), static_cast<std::int64_t>(devices_.size()));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t start = 0;
  for (auto s : sizes) {
    if (s == 0) break;
    out.emplace_back(start, start + static_cast<std::size_t>(s));
    start += static_cast<std::size_t>(s);
  }
  return out;
}

DataParallel::Plan DataParallel::plan(std::int64_t batch) const {
  Plan p;
  if (options_.deterministic) {
    p.pieces = shards(batch);
    if (p.pieces.empty()) p.pieces.push_back({0, 0});
    p.ranges = shard_ranges(p.pieces.size());
    return p;
  }
  auto sizes = split_sizes(batch, static_cast<std::int64_t>(devices_.size()));
  // Only min(B, N) replicas run (one if B == 0), as torch.nn.DataParallel's scatter; but a
  // module that runs collectives (SyncBatchNorm) runs on every replica, the others with 0 rows,
  // since its group (dist::current_group()) spans them all.
  const bool every = module_->runs_collectives();
  std::int64_t start = 0;
  for (auto size : sizes) {
    if (size == 0 && !p.pieces.empty() && !every) break;
    p.ranges.emplace_back(p.pieces.size(), p.pieces.size() + 1);
    p.pieces.push_back({start, size});
    start += size;
  }
  return p;
}

void DataParallel::store_piece_grads(const FlatBuffer& from, std::size_t k, const Tensor& rows,
                                     std::int64_t row, std::vector<char>& had) {
  Tensor dst = narrow(rows, 0, row, 1).reshape({master_.numel});
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < master_.params.size(); ++j) {
    Tensor g = from.params[j].grad();
    if (!g.defined()) continue;
    had[j] = 1;
    from.view_of(dst, j).copy_(g.to(devices_[k]));
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
    // (include/lockstep/ops/detail/tree_sum.h), so the bits equal the CPU's.
    cuda_ops::tree_sum_rows(slots);
  } else {
    replicas_->run(devices_.size(), [&](std::size_t k) {
      std::int64_t lo = width * static_cast<std::int64_t>(k) / n;
      std::int64_t hi = width * static_cast<std::int64_t>(k + 1) / n;
      if (slots.dtype() == kFloat64)
        detail::tree_sum_columns(slots.data_ptr<double>(), rows, width, lo, hi);
      else
        detail::tree_sum_columns(slots.data_ptr<float>(), rows, width, lo, hi);
    });
  }
  std::vector<char> any(master_.params.size(), 0);
  for (const auto& h : had)
    for (std::size_t j = 0; j < h.size(); ++j) any[j] = any[j] || h[j];
  return any;
}

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

}  // namespace lockstep::parallel
