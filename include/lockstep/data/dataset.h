// Datasets (torch.utils.data): map-style collections of (features, target) examples.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "lockstep/core/generator.h"
#include "lockstep/core/tensor.h"

namespace lockstep::data {

/// One example or one batch: features [..] or [B, ..], targets [] or [B].
struct Example {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  /// Example `index` in [0, size()); IndexError otherwise.
  virtual Example get(std::int64_t index) const = 0;
  /// The examples at `indices` stacked along a new dim 0 (default: get() + cat).
  virtual Example get_batch(std::span<const std::int64_t> indices) const;
};

/// Rows of `data` [N, ...] paired with rows of `targets` [N, ...] (torch TensorDataset).
class TensorDataset : public Dataset {
 public:
  /// ShapeError when the first dimensions differ or a tensor is 0-d.
  TensorDataset(Tensor data, Tensor targets);
  std::int64_t size() const override { return data_.size(0); }
  Example get(std::int64_t index) const override;
  Example get_batch(std::span<const std::int64_t> indices) const override;
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
};

/// A view of `dataset` restricted to `indices` (torch Subset).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<std::int64_t> indices);
  std::int64_t size() const override { return static_cast<std::int64_t>(indices_.size()); }
  Example get(std::int64_t index) const override;
  Example get_batch(std::span<const std::int64_t> indices) const override;
  const std::vector<std::int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<std::int64_t> indices_;
};

/// torch.utils.data.random_split: a random permutation of all indices (from `gen`, or the
/// default generator) cut into consecutive pieces of `lengths`. ValueError unless the lengths
/// are non-negative and sum to dataset->size().
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<std::int64_t>& lengths,
                                                  Generator* gen = nullptr);

}  // namespace lockstep::data
