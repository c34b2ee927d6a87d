// ZeroRedundancyOptimizer's partition (zero_redundancy_optimizer.h): which elements of which
// parameters each rank owns, where they sit in its shard buffer, the layout of a DataParallel,
// and the inner optimizers' factories.
#include <algorithm>
#include <numeric>
#include <string>

#include "lockstep/parallel/zero_redundancy_optimizer.h"

namespace lockstep::parallel {

namespace {
std::string range(std::int64_t lo, std::int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}
}  // namespace

ZeroPartition partition_for_zero(const std::vector<std::int64_t>& numels,
                                 const std::vector<std::int64_t>& offsets, std::int64_t numel,
                                 std::vector<std::pair<std::int64_t, std::int64_t>> buckets,
                                 int world) {
  if (world < 1) throw ValueError("ZeroRedundancyOptimizer: world size " + std::to_string(world));
  if (numels.size() != offsets.size())
    throw ValueError("ZeroRedundancyOptimizer: " + std::to_string(numels.size()) +
                     " parameters but " + std::to_string(offsets.size()) + " offsets");
  // The buckets tile [0, numel) (checked on a sorted copy; the packing keeps the given order).
  auto sorted = buckets;
  std::sort(sorted.begin(), sorted.end());
  std::int64_t at = 0;
  for (const auto& [lo, hi] : sorted) {
    if (lo != at || hi < lo)
      throw ValueError("ZeroRedundancyOptimizer: the layout's buckets do not tile " +
                       range(0, numel) + " (bucket " + range(lo, hi) + " after element " +
                       std::to_string(at) + ")");
    at = hi;
  }
  if (at != numel)
    throw ValueError("ZeroRedundancyOptimizer: the layout's buckets end at element " +
                     std::to_string(at) + ", not at its " + std::to_string(numel) + " elements");
  // Parameters by flat offset: each inside [0, numel), none overlapping another.
  std::vector<std::size_t> order(numels.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return offsets[a] < offsets[b]; });
  std::int64_t end = 0;
  for (const std::size_t i : order) {
    if (numels[i] == 0) continue;
    if (offsets[i] < end || offsets[i] + numels[i] > numel)
      throw ValueError("ZeroRedundancyOptimizer: parameter " + std::to_string(i) + " at " +
                       range(offsets[i], offsets[i] + numels[i]) +
                       " overlaps another or lies outside the layout's " + std::to_string(numel) +
                       " elements");
    end = offsets[i] + numels[i];
  }
  ZeroPartition out;
  out.pieces.resize(static_cast<std::size_t>(world));
  for (const auto& [lo, hi] : buckets) {
    const std::int64_t chunk = (hi - lo + world - 1) / world;
    for (int r = 0; r < world; ++r) {
      const std::int64_t a = std::min(hi, lo + r * chunk), b = std::min(hi, a + chunk);
      for (const std::size_t i : order) {
        const std::int64_t pa = std::max(a, offsets[i]), pb = std::min(b, offsets[i] + numels[i]);
        if (pa < pb)
          out.pieces[static_cast<std::size_t>(r)].push_back(
              {i, pa - offsets[i], pb - offsets[i], out.shard_numel + (pa - a)});
      }
    }
    out.shard_numel += chunk;
  }
  return out;
}

ZeroLayout zero_layout(const DataParallel& dp) {
  const FlatBuffer& flat = dp.flat_parameters();
  return {flat.params, flat.offsets, flat.numel, dp.gradient_buckets()};
}

OptimizerFactory optimizer_class(const optim::SGDOptions& options) {
  return [options](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    std::vector<Tensor> params;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].weight_decay)
        throw ValueError("SGD takes one parameter group: group " + std::to_string(g) +
                         " sets its own weight_decay");
      params.insert(params.end(), groups[g].params.begin(), groups[g].params.end());
    }
    return std::make_unique<optim::SGD>(std::move(params), options);
  };
}

OptimizerFactory optimizer_class(const optim::AdamOptions& options) {
  return [options](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(std::move(groups), options);
  };
}

OptimizerFactory optimizer_class(const optim::AdamWOptions& options) {
  return [options](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(groups), options);
  };
}

}  // namespace lockstep::parallel
