// DistributedSampler and shard_range (torch.utils.data.distributed, torch.tensor_split).
#include <numeric>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/core/generator.h"
#include "lockstep/core/tensor.h"
#include "lockstep/data/sampler.h"
#include "lockstep/ops/ops.h"

namespace lockstep::data {

namespace {

void check_replicas(const char* what, std::int64_t count, const char* count_name,
                    std::int64_t index, const char* index_name) {
  if (count < 1)
    throw ValueError(std::string(what) + ": " + count_name + " must be at least 1, got " +
                     std::to_string(count));
  if (index < 0 || index >= count)
    throw ValueError(std::string(what) + ": " + index_name + " " + std::to_string(index) +
                     " is outside [0, " + std::to_string(count) + ") for " + count_name + " " +
                     std::to_string(count));
}

}  // namespace

DistributedSampler::DistributedSampler(std::int64_t dataset_size, std::int64_t num_replicas,
                                       std::int64_t rank, bool shuffle, std::uint64_t seed,
                                       bool drop_last, Generator::Engine engine)
    : n_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last),
      engine_(engine) {
  if (dataset_size < 0)
    throw ValueError("DistributedSampler: dataset_size must not be negative, got " +
                     std::to_string(dataset_size));
  check_replicas("DistributedSampler", num_replicas, "num_replicas", rank, "rank");
  // torch: drop_last && n % R != 0 ? ceil((n - R) / R) : ceil(n / R). With n % R != 0,
  // ceil((n - R) / R) = ceil(n / R) - 1 = floor(n / R) (0 when n < R), and with n % R == 0 both
  // are n / R, so drop_last is always floor(n / R). No n + R - 1: it could overflow.
  std::int64_t q = n_ / num_replicas_;
  num_samples_ = drop_last_ ? q : q + (n_ % num_replicas_ != 0);
}

std::vector<std::int64_t> DistributedSampler::indices(std::int64_t epoch) const {
  std::vector<std::int64_t> perm;
  if (shuffle_) {
    Generator g(seed_ + static_cast<std::uint64_t>(epoch), engine_);
    perm = randperm(n_, &g).to_vector<std::int64_t>();
  } else {
    perm.resize(static_cast<std::size_t>(n_));
    std::iota(perm.begin(), perm.end(), 0);
  }
  // Padding repeats perm from its start (torch: indices += (indices * k)[:padding]), so position p
  // of the padded list holds perm[p % n]; drop_last keeps p < total_size <= n. Rank r takes the
  // positions r, r + R, ... below total_size, which is num_samples of them.
  std::vector<std::int64_t> out(static_cast<std::size_t>(num_samples_));
  for (std::int64_t i = 0; i < num_samples_; ++i)
    out[static_cast<std::size_t>(i)] =
        perm[static_cast<std::size_t>((rank_ + i * num_replicas_) % n_)];
  return out;
}

ShardRange shard_range(std::int64_t n, std::int64_t parts, std::int64_t part) {
  if (n < 0)
    throw ValueError("shard_range: the number of samples must not be negative, got " +
                     std::to_string(n));
  check_replicas("shard_range", parts, "parts", part, "part");
  auto sizes = split_sizes(n, parts);
  auto p = static_cast<std::size_t>(part);
  return {std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(p),
                          std::int64_t{0}),
          sizes[p]};
}

}  // namespace lockstep::data
