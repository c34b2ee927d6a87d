// DataLoader (torch.utils.data.DataLoader): batches of a dataset in sampler order.
//   DataLoader loader(dataset, {.batch_size = 32, .shuffle = true, .seed = 0});
//   for (auto& [x, y] : loader) { ... }
#pragma once

#include <cstdint>
#include <memory>

#include "lockstep/data/dataset.h"
#include "lockstep/data/sampler.h"

namespace lockstep::data {

struct DataLoaderOptions {
  std::int64_t batch_size = 1;
  /// RandomSampler keyed by (seed, epoch) when true, SequentialSampler otherwise. While the
  /// default generator is MT19937, each pass instead visits PyTorch's order, as
  /// DataLoader(shuffle=True) after the same torch.manual_seed (TorchRandomSampler; `seed` and
  /// the epoch are then not used).
  bool shuffle = false;
  /// Drops the last batch when it is smaller than batch_size.
  bool drop_last = false;
  std::uint64_t seed = 0;
};

class DataLoader {
 public:
  /// ValueError for batch_size < 1 or a null dataset.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  /// Batches in the order of `sampler` (torch DataLoader(dataset, sampler=...)), e.g. a
  /// DistributedSampler; the caller may keep the pointer to call set_epoch on it between passes.
  /// The sampler's indices must lie in [0, dataset->size()) (IndexError from the dataset when
  /// a batch is read otherwise). ValueError for batch_size < 1, a null dataset or sampler, or
  /// options.shuffle (torch: "sampler option is mutually exclusive with shuffle").
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const Sampler> sampler,
             DataLoaderOptions options);

  /// Number of batches per epoch (from the sampler's size).
  std::int64_t size() const;
  /// Sets the epoch the next iteration uses (each begin() otherwise uses the next epoch, starting
  /// at 0, so every pass reshuffles as in PyTorch). A sampler that keeps its own epoch
  /// (Sampler::own_epoch, DistributedSampler::set_epoch) overrides this counter.
  void set_epoch(std::int64_t epoch) { next_epoch_ = epoch; }
  std::int64_t epoch() const { return next_epoch_; }
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  class Iterator {
   public:
    Iterator(const DataLoader* loader, std::vector<std::int64_t> order, std::int64_t batch);
    const Example& operator*() const { return current_; }
    const Example* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& o) const { return batch_ != o.batch_; }
    bool operator==(const Iterator& o) const { return batch_ == o.batch_; }

   private:
    void load();
    const DataLoader* loader_;
    std::vector<std::int64_t> order_;
    std::int64_t batch_;
    Example current_;
  };

  /// Starts a pass (iter(DataLoader)). While the default generator is MT19937 this draws, as
  /// PyTorch's iterator does, one int64 base seed from it first, shuffled or not.
  Iterator begin();
  Iterator end() const;

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;
  bool builtin_shuffle_ = false;  // sampler_ is the RandomSampler of options.shuffle
  std::int64_t next_epoch_ = 0;
};

}  // namespace lockstep::data
