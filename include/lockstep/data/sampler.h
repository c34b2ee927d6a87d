// Samplers: the order in which a DataLoader visits dataset indices.
#pragma once

#include <cstdint>
#include <vector>

namespace lockstep::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of one pass, for epoch `epoch` (samplers that shuffle use it as a key).
  virtual std::vector<std::int64_t> indices(std::int64_t epoch) const = 0;
  virtual std::int64_t size() const = 0;
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

/// A fresh permutation of 0..n−1 each epoch (torch RandomSampler without replacement). The
/// permutation is a pure function of (seed, epoch), so a run can resume mid-way at any epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(std::int64_t n, std::uint64_t seed);
  std::vector<std::int64_t> indices(std::int64_t epoch) const override;
  std::int64_t size() const override { return n_; }

 private:
  std::int64_t n_;
  std::uint64_t seed_;
};

}  // namespace lockstep::data
