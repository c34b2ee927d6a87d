// Datasets, samplers, random_split and DataLoader (torch.utils.data semantics).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using data::DataLoader;
using data::TensorDataset;
using Ids = std::vector<std::int64_t>;

// n samples: features [n, 2] = (i, 10 i), targets [n] = i, so every batch names its samples.
std::shared_ptr<TensorDataset> numbered(std::int64_t n) {
  std::vector<double> x;
  for (std::int64_t i = 0; i < n; ++i) {
    x.push_back(static_cast<double>(i));
    x.push_back(10.0 * static_cast<double>(i));
  }
  return std::make_shared<TensorDataset>(tensor(std::span<const double>(x), {n, 2}, kFloat32),
                                         arange(n));
}

// One epoch: the sizes of the batches and the concatenated target ids.
std::pair<Ids, Ids> epoch(DataLoader& loader) {
  Ids sizes, ids;
  for (const auto& [x, y] : loader) {
    sizes.push_back(y.size(0));
    EXPECT_EQ(x.size(0), y.size(0));
    auto yi = y.to_vector<std::int64_t>();
    auto xv = x.to_vector<double>();
    for (std::size_t r = 0; r < yi.size(); ++r) {
      EXPECT_EQ(xv[2 * r], static_cast<double>(yi[r]));  // features travel with their target
      EXPECT_EQ(xv[2 * r + 1], 10.0 * static_cast<double>(yi[r]));
    }
    ids.insert(ids.end(), yi.begin(), yi.end());
  }
  return {sizes, ids};
}

Ids iota(std::int64_t n) {
  Ids v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}
Ids sorted(Ids v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(TensorDatasetTest, GetAndSize) {
  auto ds = numbered(5);
  EXPECT_EQ(ds->size(), 5);
  auto ex = ds->get(3);
  EXPECT_EQ(ex.data.shape(), (Shape{2}));
  EXPECT_EQ(ex.data.to_vector<double>(), (std::vector<double>{3, 30}));
  EXPECT_EQ(ex.target.dim(), 0);
  EXPECT_EQ(ex.target.item(), 3.0);
  Ids idx{4, 0, 4};
  auto b = ds->get_batch(idx);
  EXPECT_EQ(b.target.to_vector<std::int64_t>(), idx);
  EXPECT_THROW(ds->get(5), IndexError);
  EXPECT_THROW(TensorDataset(zeros({3, 2}), zeros({4})), ShapeError);
}

TEST(DataLoaderTest, BatchSizesWithAndWithoutDropLast) {
  auto ds = numbered(10);
  DataLoader keep(ds, {.batch_size = 3});
  EXPECT_EQ(keep.size(), 4);
  auto [sizes, ids] = epoch(keep);
  EXPECT_EQ(sizes, (Ids{3, 3, 3, 1}));
  EXPECT_EQ(ids, iota(10));  // in order without shuffle
  DataLoader drop(ds, {.batch_size = 3, .drop_last = true});
  EXPECT_EQ(drop.size(), 3);
  auto [dsizes, dids] = epoch(drop);
  EXPECT_EQ(dsizes, (Ids{3, 3, 3}));
  EXPECT_EQ(dids, iota(9));
  DataLoader whole(ds, {.batch_size = 32});
  EXPECT_EQ(epoch(whole).first, (Ids{10}));
  DataLoader exact(ds, {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(epoch(exact).first, (Ids{5, 5}));
  EXPECT_THROW(DataLoader(ds, {.batch_size = 0}), ValueError);
  DataLoader empty(numbered(0), {.batch_size = 3});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(epoch(empty).first.empty());
}

TEST(DataLoaderTest, ShuffleIsAPermutationNewEachEpochAndSeeded) {
  auto ds = numbered(50);
  DataLoader a(ds, {.batch_size = 7, .shuffle = true, .seed = 1});
  auto [s0, e0] = epoch(a);
  auto [s1, e1] = epoch(a);
  EXPECT_EQ(s0, (Ids{7, 7, 7, 7, 7, 7, 7, 1}));
  EXPECT_EQ(sorted(e0), iota(50));  // every sample exactly once
  EXPECT_EQ(sorted(e1), iota(50));
  EXPECT_NE(e0, iota(50));
  EXPECT_NE(e0, e1);  // reshuffled each epoch

  DataLoader b(ds, {.batch_size = 7, .shuffle = true, .seed = 1});
  EXPECT_EQ(epoch(b).second, e0);  // same seed, same order
  EXPECT_EQ(epoch(b).second, e1);
  DataLoader c(ds, {.batch_size = 7, .shuffle = true, .seed = 2});
  EXPECT_NE(epoch(c).second, e0);

  a.set_epoch(0);  // replays epoch 0, then continues with epoch 1
  EXPECT_EQ(a.epoch(), 0);
  EXPECT_EQ(epoch(a).second, e0);
  EXPECT_EQ(epoch(a).second, e1);
  a.set_epoch(1);
  EXPECT_EQ(epoch(a).second, e1);
}

TEST(DataLoaderTest, ShuffleWithDropLastDropsOnlyTheTail) {
  auto ds = numbered(10);
  DataLoader loader(ds, {.batch_size = 4, .shuffle = true, .drop_last = true, .seed = 3});
  auto [sizes, ids] = epoch(loader);
  EXPECT_EQ(sizes, (Ids{4, 4}));
  EXPECT_EQ(std::set<std::int64_t>(ids.begin(), ids.end()).size(), 8u);  // no duplicates
}

TEST(RandomSplit, SizesDisjointAndDeterministic) {
  auto ds = numbered(10);
  Generator g1(42), g2(42), g3(43);
  auto parts = data::random_split(ds, {7, 3}, &g1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0]->size(), 7);
  EXPECT_EQ(parts[1]->size(), 3);
  Ids all = parts[0]->indices();
  all.insert(all.end(), parts[1]->indices().begin(), parts[1]->indices().end());
  EXPECT_EQ(sorted(all), iota(10));  // disjoint and covering
  EXPECT_NE(all, iota(10));          // shuffled
  EXPECT_EQ(parts[1]->get(0).target.item(), static_cast<double>(parts[1]->indices()[0]));

  auto again = data::random_split(ds, {7, 3}, &g2);
  EXPECT_EQ(again[0]->indices(), parts[0]->indices());
  EXPECT_EQ(again[1]->indices(), parts[1]->indices());
  auto other = data::random_split(ds, {7, 3}, &g3);
  EXPECT_NE(other[0]->indices(), parts[0]->indices());

  auto with_empty = data::random_split(ds, {10, 0}, &g1);
  EXPECT_EQ(with_empty[1]->size(), 0);
  EXPECT_THROW(data::random_split(ds, {7, 2}), ValueError);
  EXPECT_THROW(data::random_split(ds, {11, -1}), ValueError);
  EXPECT_THROW(data::random_split(ds, {7, 4}), ValueError);
}

TEST(RandomSplit, SubsetsWorkWithADataLoader) {
  auto ds = numbered(10);
  Generator g(5);
  auto parts = data::random_split(ds, {6, 4}, &g);
  DataLoader loader(parts[0], {.batch_size = 4});
  auto [sizes, ids] = epoch(loader);
  EXPECT_EQ(sizes, (Ids{4, 2}));
  EXPECT_EQ(ids, parts[0]->indices());
}

TEST(Samplers, SequentialAndRandom) {
  data::SequentialSampler seq(6);
  EXPECT_EQ(seq.size(), 6);
  EXPECT_EQ(seq.indices(0), iota(6));
  EXPECT_EQ(seq.indices(5), iota(6));
  EXPECT_TRUE(data::SequentialSampler(0).indices(0).empty());

  data::RandomSampler r(40, 9), same(40, 9), other(40, 10);
  EXPECT_EQ(r.size(), 40);
  auto e0 = r.indices(0), e1 = r.indices(1);
  EXPECT_EQ(sorted(e0), iota(40));
  EXPECT_EQ(sorted(e1), iota(40));
  EXPECT_NE(e0, e1);
  EXPECT_EQ(r.indices(0), e0);  // a pure function of (seed, epoch)
  EXPECT_EQ(same.indices(1), e1);
  EXPECT_NE(other.indices(0), e0);
  EXPECT_THROW(data::RandomSampler(-1, 0), ValueError);
}

}  // namespace
}  // namespace lockstep::testing
