// Samplers: the order in which a DataLoader visits dataset indices.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep/core/generator.h"

namespace lockstep::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of one pass, for epoch `epoch` (samplers that shuffle use it as a key).
  virtual std::vector<std::int64_t> indices(std::int64_t epoch) const = 0;
  virtual std::int64_t size() const = 0;
  /// The epoch set on the sampler itself, for samplers that keep one (DistributedSampler): a
  /// DataLoader then passes it to indices() instead of its own epoch counter, so that, as in
  /// PyTorch, `sampler->set_epoch(e)` before each pass picks the order. Default: none.
  virtual std::optional<std::int64_t> own_epoch() const { return std::nullopt; }
};

/// 0, 1, ..., n−1 every epoch (torch SequentialSampler).
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(std::int64_t n);
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  std::int64_t size() const override { return n_; }

 private:
  std::int64_t n_;
};

/// A fresh permutation of 0..n−1 each epoch (torch RandomSampler without replacement, in
/// Lockstep's own order: TorchRandomSampler gives PyTorch's). The permutation is a pure function
/// of (seed, epoch), so a run can resume mid-way at any epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(std::int64_t n, std::uint64_t seed);
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  std::int64_t size() const override { return n_; }

 private:
  std::int64_t n_;
  std::uint64_t seed_;
};

/// torch.utils.data.RandomSampler (without replacement) as PyTorch draws it
/// (torch/utils/data/sampler.py): each pass (each indices() call; `epoch` is ignored) with no
/// generator takes a seed from the default generator (an int64 random_(): 64 bits) and returns
/// randperm(n) of a fresh MT19937 generator seeded with it; with a generator it returns
/// randperm(n, generator) and advances that generator by two permutations, as torch's does (its
/// loop ends with `randperm(n, generator)[:num_samples % n]`, an empty slice of a second
/// permutation drawn all the same). So after manual_seed(s) on an MT19937
/// default generator the orders are torch.manual_seed(s)'s. The default generator or `generator`
/// must outlive the sampler; not a pure function of the epoch (resuming needs the generator's
/// state, Generator::get_state).
class TorchRandomSampler : public Sampler {
 public:
  explicit TorchRandomSampler(std::int64_t n, Generator* generator = nullptr);
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  std::int64_t size() const override { return n_; }

 private:
  std::int64_t n_;
  Generator* generator_;
};

/// One replica's share of a dataset (torch.utils.data.distributed.DistributedSampler, torch 1.13
/// torch/utils/data/distributed.py). Each replica (rank) sees `size()` = num_samples indices:
///   num_samples = drop_last && n % R != 0 ? ceil((n − R) / R) : ceil(n / R), with n =
///   dataset_size and R = num_replicas; total_size = num_samples · R.
/// A pass takes a permutation of 0..n−1 (randperm seeded by seed + epoch when `shuffle`, else
/// 0..n−1 in order), pads it to total_size by repeating indices from its start (again and again
/// when the padding exceeds n) unless `drop_last`, which truncates it to total_size instead, and
/// gives rank r the elements r, r + R, r + 2R, ... (indices[rank:total_size:num_replicas]). So the
/// R shards of one epoch are disjoint unless padded, and together cover every index (drop_last:
/// all but the n − total_size last of the permutation).
/// The permutation is randperm(n) of Generator(seed + epoch, engine): with Engine::MT19937 it is
/// torch's (torch.Generator().manual_seed(seed + epoch)), so every rank's indices are PyTorch's;
/// with Philox Lockstep's own. `engine` defaults to the default generator's engine when the
/// sampler is made. Every replica computes the same permutation from (seed, epoch), which is what
/// makes the shards disjoint.
/// Use: one sampler per rank, `sampler->set_epoch(e)` before each epoch (otherwise every epoch
/// repeats the order of epoch 0), and `DataLoader(dataset, sampler, options)`.
class DistributedSampler : public Sampler {
 public:
  /// ValueError when dataset_size < 0, num_replicas < 1, or rank is outside [0, num_replicas).
  DistributedSampler(std::int64_t dataset_size, std::int64_t num_replicas, std::int64_t rank,
                     bool shuffle = true, std::uint64_t seed = 0, bool drop_last = false,
                     Generator::Engine engine = default_generator().engine());

  /// This rank's indices for epoch `epoch` (ignores the set epoch); int64 in [0, dataset_size),
  /// size() of them. The shuffle seed is seed + epoch (modulo 2^64, as a negative epoch wraps).
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  /// This rank's indices for the epoch given to set_epoch (0 until then), as iterating the torch
  /// sampler does; a DataLoader over this sampler uses the same epoch (see own_epoch()).
  std::vector<std::int64_t> indices() const { return indices(epoch_); }
  /// num_samples: the number of indices each rank gets per epoch.
  std::int64_t size() const override { return num_samples_; }
  std::optional<std::int64_t> own_epoch() const override { return epoch_; }

  /// Sets the epoch of the next pass (torch DistributedSampler.set_epoch); call it on every rank
  /// with the same value before each epoch so that shuffling differs from epoch to epoch.
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }

  std::int64_t dataset_size() const { return n_; }
  std::int64_t num_replicas() const { return num_replicas_; }
  std::int64_t rank() const { return rank_; }
  /// num_samples · num_replicas: the padded (or truncated) length of one epoch over all ranks.
  std::int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  std::int64_t n_, num_replicas_, rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  Generator::Engine engine_;
  std::int64_t num_samples_;
  std::int64_t epoch_ = 0;
};

/// A contiguous range [start, start + size) of the sample indices.
struct ShardRange {
  std::int64_t start = 0;
  std::int64_t size = 0;
};

/// Part `part` of n samples split into `parts` contiguous pieces by torch.tensor_split's rule
/// (sizes differ by at most one, larger first; the same split_sizes() that tensor_split and
/// DataParallel use): 10 on 3 -> [0, 4), [4, 7), [7, 10); 2 on 3 -> sizes 1, 1, 0. Every sample
/// lies in exactly one part, without padding or dropping, which is what exact evaluation across
/// ranks needs. ValueError when n < 0, parts < 1, or part is outside [0, parts).
ShardRange shard_range(std::int64_t n, std::int64_t parts, std::int64_t part);

}  // namespace lockstep::data
