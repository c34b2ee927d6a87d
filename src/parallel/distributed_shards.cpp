// DistributedDataParallel in deterministic mode: every rank's shard gradient rows, has-gradient
// flags and shard losses gathered into global shard order, so the fixed tree over all shards
// (data_parallel_deterministic.cpp) gives the bits of one process with the same shards.
#include <algorithm>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/distributed.h"

namespace lockstep::parallel {

DataParallel::ShardRows DistributedDataParallel::gather_shards(ShardRows local,
                                                               const GlobalStep& step) {
  auto& group = *process_group();
  const int world = group.size();
  const std::size_t nparams = master_.params.size();
  const auto width = static_cast<std::int64_t>(nparams) + 1;
  const std::int64_t rows = local.rows.size(0);  // max(widest rank's pieces, 1)
  std::int64_t all_pieces = 0;
  for (auto m : step.rank_pieces) all_pieces += m;
  // Flags and losses travel as one float64 [rows, parameters + 1] block per rank.
  Tensor meta = zeros({rows, width}, kFloat64);
  double* m = meta.data_ptr<double>();
  for (std::size_t s = 0; s < local.had.size(); ++s) {
    const auto row = static_cast<std::int64_t>(s) * width;
    for (std::size_t j = 0; j < nparams; ++j)
      m[row + static_cast<std::int64_t>(j)] = local.had[s][j];
    m[row + width - 1] = local.losses[s];
  }
  std::vector<Tensor> slot_parts, meta_parts;
  for (int r = 0; r < world; ++r) {
    slot_parts.push_back(zeros(local.rows.shape(), local.rows.options()));
    meta_parts.push_back(zeros(meta.shape(), kFloat64));
  }
  group.all_gather(slot_parts, local.rows);
  group.all_gather(meta_parts, meta);
  const auto elem = static_cast<std::int64_t>(element_size(master_.buffer.dtype()));
  bytes_moved_ += static_cast<std::int64_t>(world - 1) * rows * master_.numel * elem;
  // The rows stay on the device they were gathered to (over NCCL on a GPU: device to device).
  ShardRows all;
  all.rows = zeros({std::max<std::int64_t>(all_pieces, 1), master_.numel}, local.rows.options());
  rank_losses_.assign(static_cast<std::size_t>(world), 0.0);
  std::int64_t row = 0;
  for (int r = 0; r < world; ++r) {
    const std::int64_t pieces = step.rank_pieces[static_cast<std::size_t>(r)];
    if (pieces == 0) continue;
    {
      NoGradGuard no_grad;
      narrow(all.rows, 0, row, pieces)
          .copy_(narrow(slot_parts[static_cast<std::size_t>(r)], 0, 0, pieces));
    }
    const double* md = meta_parts[static_cast<std::size_t>(r)].data_ptr<double>();
    for (std::int64_t s = 0; s < pieces; ++s) {
      std::vector<char> h(nparams);
      for (std::size_t j = 0; j < nparams; ++j)
        h[j] = md[s * width + static_cast<std::int64_t>(j)] != 0;
      all.had.push_back(std::move(h));
      all.losses.push_back(md[s * width + width - 1]);
      rank_losses_[static_cast<std::size_t>(r)] += all.losses.back();
    }
    row += pieces;
  }
  return all;
}

}  // namespace lockstep::parallel
