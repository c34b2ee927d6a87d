// How work is cut across ranks: split_batch (the CLI's rank parts, deterministic shards) and
// evaluate_exact (every validation row exactly once across ranks).
#include "lockstep/ops/ops.h"
#include "lockstep/parallel/distributed.h"

namespace lockstep::parallel {

std::vector<std::pair<std::int64_t, std::int64_t>> split_batch(std::int64_t batch,
                                                               std::int64_t parts,
                                                               std::int64_t shard_size) {
  if (batch < 0 || parts < 1 || shard_size < 0)
    throw ValueError("split_batch: need batch >= 0, parts >= 1 and shard_size >= 0 (got " +
                     std::to_string(batch) + ", " + std::to_string(parts) + ", " +
                     std::to_string(shard_size) + ")");
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  if (shard_size == 0) {
    std::int64_t start = 0;
    for (auto size : split_sizes(batch, parts)) {
      out.emplace_back(start, size);
      start += size;
    }
    return out;
  }
  const std::int64_t shards = (batch + shard_size - 1) / shard_size;
  std::int64_t first = 0;
  for (auto n : split_sizes(shards, parts)) {
    const std::int64_t start = std::min(batch, first * shard_size);
    const std::int64_t end = std::min(batch, (first + n) * shard_size);
    out.emplace_back(start, end - start);
    first += n;
  }
  return out;
}

std::vector<double> evaluate_exact(dist::ProcessGroup* group, const Tensor& x, const Tensor& y,
                                   const MetricSums& sums, std::size_t num_sums) {
  if (x.dim() < 1 || y.dim() < 1 || x.size(0) != y.size(0))
    throw ShapeError("evaluate_exact: x " + x.shape().str() + " and y " + y.shape().str() +
                     " must have the same number of rows");
  const std::int64_t n = x.size(0);
  const int world = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const auto [start, count] = split_batch(n, world)[static_cast<std::size_t>(rank)];
  std::vector<double> totals(num_sums + 1, 0.0);
  if (count > 0) {
    const std::vector<double> local = sums(x.narrow(0, start, count), y.narrow(0, start, count));
    if (local.size() != num_sums)
      throw ValueError("evaluate_exact: the metric returned " + std::to_string(local.size()) +
                       " sums, expected " + std::to_string(num_sums));
    std::copy(local.begin(), local.end(), totals.begin());
  }
  totals[num_sums] = static_cast<double>(count);
  if (group && world > 1) {
    Tensor t = tensor(std::span<const double>(totals));
    group->all_reduce(t, dist::ReduceOp::Sum);
    totals = t.to_vector<double>();
  }
  return totals;
}

}  // namespace lockstep::parallel
