#include "lockstep/parallel/distributed.h"

#include "lockstep/ops/ops.h"

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

namespace {

DataParallelOptions data_parallel_options(const DistributedDataParallelOptions& o,
                                          std::shared_ptr<dist::ProcessGroup> group) {
  if (!group) throw ValueError("DistributedDataParallel: null process group");
  DataParallelOptions d;
  d.deterministic = o.deterministic;
  d.shard_size = o.shard_size;
  d.reducer = o.reducer;
  d.seed = o.seed;
  d.threads_per_device = o.threads_per_device;
  d.process_group = std::move(group);
  return d;
}

std::vector<Device> local_devices(const DistributedDataParallelOptions& o) {
  return o.device_ids.empty() ? std::vector<Device>{cpu(0)} : o.device_ids;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<dist::ProcessGroup> process_group,
                                                 DistributedDataParallelOptions options)
    : DataParallel(std::move(module), local_devices(options), std::nullopt,
                   data_parallel_options(options, std::move(process_group))) {
  broadcast_state(0);
}

void DistributedDataParallel::join() {
  joined_ = true;
  all_joined_ = false;
  const Tensor x = zeros({0});
  const Tensor y = zeros({0}, kInt64);
  const LossFn none = [](const Tensor&, const Tensor&) -> Tensor {
    throw Error("internal: a joined rank computed a loss");
  };
  try {
    while (!all_joined_) forward_backward(x, y, none);
  } catch (...) {
    joined_ = false;
    all_joined_ = false;
    throw;
  }
  joined_ = false;
  all_joined_ = false;
  broadcast_state(last_active_rank_);
}

std::shared_ptr<nn::Module> DistributedDataParallel::clone() const {
  throw ValueError(
      "DistributedDataParallel cannot be cloned: every rank constructs it collectively");
}

}  // namespace lockstep::parallel
