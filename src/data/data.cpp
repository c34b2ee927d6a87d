// Datasets, samplers and the DataLoader.
#include <numeric>

#include "lockstep/data/dataloader.h"
#include "lockstep/ops/ops.h"
#include "lockstep/ops/random.h"

namespace lockstep::data {

Example Dataset::get_batch(std::span<const std::int64_t> indices) const {
  std::vector<Tensor> xs, ys;
  for (auto i : indices) {
    Example e = get(i);
    xs.push_back(reshape(e.data, [&] {
      Shape s{1};
      for (auto d : e.data.shape()) s.push_back(d);
      return s;
    }()));
    ys.push_back(reshape(e.target, [&] {
      Shape s{1};
      for (auto d : e.target.shape()) s.push_back(d);
      return s;
    }()));
  }
  if (xs.empty()) throw ValueError("get_batch: empty index list");
  return {cat(xs, 0), cat(ys, 0)};
}

TensorDataset::TensorDataset(Tensor data, Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  if (!data_.defined() || !targets_.defined() || data_.dim() == 0 || targets_.dim() == 0 ||
      data_.size(0) != targets_.size(0))
    throw ShapeError("TensorDataset: data " +
                     (data_.defined() ? data_.shape().str() : std::string("undefined")) +
                     " and targets " +
                     (targets_.defined() ? targets_.shape().str() : std::string("undefined")) +
                     " must have the same first dimension");
}

Example TensorDataset::get(std::int64_t index) const {
  if (index < 0 || index >= size())
    throw IndexError("TensorDataset: index " + std::to_string(index) + " out of range for size " +
                     std::to_string(size()));
  return {reshape(narrow(data_, 0, index, 1), [&] {
            Shape s;
            for (int i = 1; i < data_.dim(); ++i) s.push_back(data_.size(i));
            return s;
          }()),
          reshape(narrow(targets_, 0, index, 1), [&] {
            Shape s;
            for (int i = 1; i < targets_.dim(); ++i) s.push_back(targets_.size(i));
            return s;
          }())};
}

Example TensorDataset::get_batch(std::span<const std::int64_t> indices) const {
  // Consecutive indices are a view; anything else is gathered with index_select.
  bool consecutive = !indices.empty();
  for (std::size_t i = 1; consecutive && i < indices.size(); ++i)
    consecutive = indices[i] == indices[i - 1] + 1;
  auto n = static_cast<std::int64_t>(indices.size());
  if (consecutive && indices[0] >= 0 && indices[0] + n <= size())
    return {narrow(data_, 0, indices[0], n), narrow(targets_, 0, indices[0], n)};
  Tensor idx = tensor(std::span<const std::int64_t>(indices.data(), indices.size()));
  return {index_select(data_, 0, idx), index_select(targets_, 0, idx)};
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<std::int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  if (!dataset_) throw ValueError("Subset: null dataset");
  for (auto i : indices_)
    if (i < 0 || i >= dataset_->size())
      throw IndexError("Subset: index " + std::to_string(i) + " out of range for size " +
                       std::to_string(dataset_->size()));
}

Example Subset::get(std::int64_t index) const {
  if (index < 0 || index >= size())
    throw IndexError("Subset: index " + std::to_string(index) + " out of range for size " +
                     std::to_string(size()));
  return dataset_->get(indices_[static_cast<std::size_t>(index)]);
}

Example Subset::get_batch(std::span<const std::int64_t> indices) const {
  std::vector<std::int64_t> mapped;
  mapped.reserve(indices.size());
  for (auto i : indices) {
    if (i < 0 || i >= size())
      throw IndexError("Subset: index " + std::to_string(i) + " out of range for size " +
                       std::to_string(size()));
    mapped.push_back(indices_[static_cast<std::size_t>(i)]);
  }
  return dataset_->get_batch(mapped);
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<std::int64_t>& lengths,
                                                  Generator* gen) {
  if (!dataset) throw ValueError("random_split: null dataset");
  std::int64_t total = 0;
  for (auto l : lengths) {
    if (l < 0) throw ValueError("random_split: negative length " + std::to_string(l));
    total += l;
  }
  if (total != dataset->size())
    throw ValueError("random_split: lengths sum to " + std::to_string(total) +
                     " but the dataset has " + std::to_string(dataset->size()) + " examples");
  auto perm = randperm(total, gen).to_vector<std::int64_t>();
  std::vector<std::shared_ptr<Subset>> out;
  std::int64_t start = 0;
  for (auto l : lengths) {
    out.push_back(std::make_shared<Subset>(
        dataset, std::vector<std::int64_t>(perm.begin() + start, perm.begin() + start + l)));
    start += l;
  }
  return out;
}

SequentialSampler::SequentialSampler(std::int64_t n) : n_(n) {
  if (n < 0) throw ValueError("SequentialSampler: negative size");
}

std::vector<std::int64_t> SequentialSampler::indices(std::int64_t) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(n_));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

RandomSampler::RandomSampler(std::int64_t n, std::uint64_t seed) : n_(n), seed_(seed) {
  if (n < 0) throw ValueError("RandomSampler: negative size");
}

std::vector<std::int64_t> RandomSampler::indices(std::int64_t epoch) const {
  // Key the stream by (seed, epoch): the epoch selects a disjoint region of the Philox stream.
  Generator g(seed_);
  g.set_offset(static_cast<std::uint64_t>(epoch) << 40);
  return randperm(n_, &g).to_vector<std::int64_t>();
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_) throw ValueError("DataLoader: null dataset");
  if (options_.batch_size < 1)
    throw ValueError("DataLoader: batch_size must be at least 1, got " +
                     std::to_string(options_.batch_size));
  if (options_.shuffle)
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
  builtin_shuffle_ = options_.shuffle;
  if (!options_.shuffle)
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset,
                       std::shared_ptr<const Sampler> sampler, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options), sampler_(std::move(sampler)) {
  if (!dataset_) throw ValueError("DataLoader: null dataset");
  if (!sampler_) throw ValueError("DataLoader: null sampler");
  if (options_.batch_size < 1)
    throw ValueError("DataLoader: batch_size must be at least 1, got " +
                     std::to_string(options_.batch_size));
  if (options_.shuffle)
    throw ValueError(
        "DataLoader: shuffle must be false with a sampler (the sampler sets the order)");
}

std::int64_t DataLoader::size() const {
  std::int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : n / b + (n % b != 0);  // no n + b - 1: it overflows
}

DataLoader::Iterator DataLoader::begin() {
  const bool torch_streams = default_generator().engine() == Generator::Engine::MT19937;
  if (torch_streams) {
    // PyTorch's iter(DataLoader): _BaseDataLoaderIter draws its base seed (an int64 random_()
    // of the default generator) even unshuffled, then RandomSampler draws its own seed.
    Tensor base_seed = empty({}, kInt64);
    random_(base_seed);
  }
  auto order = torch_streams && builtin_shuffle_
                   ? TorchRandomSampler(dataset_->size()).indices(0)
                   : sampler_->indices(sampler_->own_epoch().value_or(next_epoch_));
  ++next_epoch_;
  return Iterator(this, std::move(order), 0);
}

DataLoader::Iterator DataLoader::end() const { return Iterator(this, {}, size()); }

DataLoader::Iterator::Iterator(const DataLoader* loader, std::vector<std::int64_t> order,
                               std::int64_t batch)
    : loader_(loader), order_(std::move(order)), batch_(batch) {
  if (!order_.empty() && batch_ < loader_->size()) load();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++batch_;
  if (batch_ < loader_->size()) load();
  return *this;
}

void DataLoader::Iterator::load() {
  std::int64_t b = loader_->options_.batch_size;
  std::int64_t start = batch_ * b;
  std::int64_t len = std::min<std::int64_t>(b, static_cast<std::int64_t>(order_.size()) - start);
  current_ = loader_->dataset_->get_batch(
      std::span<const std::int64_t>(order_.data() + start, static_cast<std::size_t>(len)));
}

}  // namespace lockstep::data
