// DistributedSampler (torch.utils.data.distributed.DistributedSampler semantics) and shard_range
// (torch.tensor_split sizes).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include "support/helpers.h"

namespace lockstep::testing {
namespace {

using data::DataLoader;
using data::DistributedSampler;
using Ids = std::vector<std::int64_t>;

Ids iota(std::int64_t n) {
  Ids v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}
Ids sorted(Ids v) {
  std::sort(v.begin(), v.end());
  return v;
}
Ids concat(const std::vector<Ids>& shards) {
  Ids all;
  for (const auto& s : shards) all.insert(all.end(), s.begin(), s.end());
  return all;
}
// The shards of every rank for one epoch.
std::vector<Ids> shards(std::int64_t n, std::int64_t replicas, std::int64_t epoch, bool shuffle,
                        std::uint64_t seed, bool drop_last) {
  std::vector<Ids> out;
  for (std::int64_t r = 0; r < replicas; ++r)
    out.push_back(DistributedSampler(n, replicas, r, shuffle, seed, drop_last).indices(epoch));
  return out;
}

// Case C04 of shared/cases/README.md: ids 0..7, 2 replicas, shuffle, seed 0, 3 epochs with
// set_epoch(e).
TEST(DistributedSamplerTest, CaseC04DisjointCoveringShardsNewOrderEachEpochReproducible) {
  auto run = [] {
    auto s0 = std::make_shared<DistributedSampler>(8, 2, 0, true, 0);
    auto s1 = std::make_shared<DistributedSampler>(8, 2, 1, true, 0);
    std::vector<std::vector<Ids>> orders;  // [epoch][rank]
    for (std::int64_t e = 0; e < 3; ++e) {
      s0->set_epoch(e);
      s1->set_epoch(e);
      orders.push_back({s0->indices(), s1->indices()});
    }
    return orders;
  };
  auto orders = run();
  for (const auto& epoch : orders) {
    ASSERT_EQ(epoch[0].size(), 4u);
    ASSERT_EQ(epoch[1].size(), 4u);
    std::set<std::int64_t> a(epoch[0].begin(), epoch[0].end()), b(epoch[1].begin(), epoch[1].end());
    EXPECT_EQ(a.size(), 4u);
    EXPECT_EQ(b.size(), 4u);
    for (auto i : a) EXPECT_EQ(b.count(i), 0u) << "index " << i << " on both ranks";
    EXPECT_EQ(sorted(concat(epoch)), iota(8));
  }
  EXPECT_NE(concat(orders[0]), concat(orders[1]));
  EXPECT_NE(concat(orders[1]), concat(orders[2]));
  EXPECT_NE(concat(orders[0]), iota(8));  // shuffled
  EXPECT_EQ(run(), orders);               // same seed, same orders
}

TEST(DistributedSamplerTest, ShuffleSeedIsSeedPlusEpochAndIndicesTakesTheGivenEpoch) {
  DistributedSampler s(20, 3, 1, true, 5);
  EXPECT_EQ(s.epoch(), 0);
  EXPECT_EQ(s.indices(), s.indices(0));
  Ids e2 = s.indices(2);
  s.set_epoch(2);
  EXPECT_EQ(s.epoch(), 2);
  EXPECT_EQ(s.indices(), e2);
  EXPECT_EQ(s.indices(0), DistributedSampler(20, 3, 1, true, 5).indices(0));  // not the set epoch
  EXPECT_NE(s.indices(0), e2);
  // torch seeds the permutation with seed + epoch: (seed 5, epoch 2) is (seed 7, epoch 0).
  EXPECT_EQ(DistributedSampler(20, 3, 1, true, 7).indices(0), e2);
  EXPECT_NE(DistributedSampler(20, 3, 1, true, 6).indices(0), e2);
}

TEST(DistributedSamplerTest, PaddingRepeatsIndicesFromTheStart) {
  // n = 5 on 2 ranks: 3 each, total 6, the first index of the permutation (rank 0's first)
  // repeated as the last of rank 1.
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    auto s = shards(5, 2, epoch, true, 11, false);
    ASSERT_EQ(s[0].size(), 3u);
    ASSERT_EQ(s[1].size(), 3u);
    Ids all = concat(s);
    EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()),
              (std::set<std::int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(s[1][2], s[0][0]);
  }
  EXPECT_EQ(DistributedSampler(5, 2, 0).size(), 3);
  EXPECT_EQ(DistributedSampler(5, 2, 0).total_size(), 6);

  // n = 2 on 5 ranks: padding of 3 > n, so the permutation repeats more than once: p0 p1 p0 p1 p0.
  auto s = shards(2, 5, 0, true, 0, false);
  std::map<std::int64_t, int> count;
  for (const auto& shard : s) {
    ASSERT_EQ(shard.size(), 1u);
    ++count[shard[0]];
  }
  EXPECT_EQ(count.size(), 2u);
  EXPECT_EQ(count[s[0][0]], 3);
  EXPECT_EQ(count[s[1][0]], 2);
  EXPECT_EQ(s[2], s[0]);
  EXPECT_EQ(s[3], s[1]);
  EXPECT_EQ(s[4], s[0]);
}

TEST(DistributedSamplerTest, DropLastTruncatesToAnEvenSplit) {
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    auto s = shards(5, 2, epoch, true, 3, true);
    ASSERT_EQ(s[0].size(), 2u);
    ASSERT_EQ(s[1].size(), 2u);
    Ids all = concat(s);
    EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), 4u);  // no duplicates
    for (auto i : all) EXPECT_TRUE(i >= 0 && i < 5);
  }
  EXPECT_EQ(DistributedSampler(5, 2, 1, true, 0, true).size(), 2);
  EXPECT_EQ(DistributedSampler(5, 2, 1, true, 0, true).total_size(), 4);
  EXPECT_EQ(DistributedSampler(2, 5, 4, true, 0, true).size(), 0);  // fewer samples than ranks
  EXPECT_TRUE(DistributedSampler(2, 5, 4, true, 0, true).indices(0).empty());
  EXPECT_EQ(DistributedSampler(6, 3, 0, true, 0, true).size(), 2);  // divisible: nothing dropped
}

// Expected shards from torch 1.13 (/usr/bin/python3):
//   from torch.utils.data.distributed import DistributedSampler
//   [list(DistributedSampler(range(n), num_replicas=R, rank=r, shuffle=False,
//                            drop_last=drop)) for r in range(R)]
TEST(DistributedSamplerTest, UnshuffledShardsMatchTorch) {
  struct Case {
    std::int64_t n, replicas;
    bool drop_last;
    std::vector<Ids> expected;
  };
  std::vector<Case> cases = {
      {10, 3, false, {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}},
      {10, 3, true, {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}},
      {5, 2, false, {{0, 2, 4}, {1, 3, 0}}},
      {5, 2, true, {{0, 2}, {1, 3}}},
      {2, 5, false, {{0}, {1}, {0}, {1}, {0}}},
      {2, 5, true, {{}, {}, {}, {}, {}}},
      {7, 4, false, {{0, 4}, {1, 5}, {2, 6}, {3, 0}}},
      {1, 4, false, {{0}, {0}, {0}, {0}}},
      {0, 3, false, {{}, {}, {}}},
  };
  for (const auto& c : cases) {
    for (std::int64_t epoch : {0, 1}) {
      EXPECT_EQ(shards(c.n, c.replicas, epoch, false, 0, c.drop_last), c.expected)
          << "n=" << c.n << " R=" << c.replicas << " drop_last=" << c.drop_last;
    }
    for (std::int64_t r = 0; r < c.replicas; ++r)
      EXPECT_EQ(DistributedSampler(c.n, c.replicas, r, false, 0, c.drop_last).size(),
                static_cast<std::int64_t>(c.expected[0].size()));
  }
}

TEST(DistributedSamplerTest, DataLoaderFollowsTheSamplersSetEpoch) {
  // 10 numbered samples on 3 ranks, batch 3: 4 indices per rank (padded), batches of 3 and 1.
  auto ds = std::make_shared<data::TensorDataset>(arange(0.0, 100.0, 10.0), arange(10));
  std::vector<std::shared_ptr<DistributedSampler>> samplers;
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (std::int64_t r = 0; r < 3; ++r) {
    samplers.push_back(std::make_shared<DistributedSampler>(10, 3, r, true, 4));
    loaders.push_back(std::make_unique<DataLoader>(ds, samplers.back(),
                                                   data::DataLoaderOptions{.batch_size = 3}));
  }
  EXPECT_EQ(loaders[0]->size(), 2);  // from the sampler's 4, not the dataset's 10
  auto pass = [](DataLoader& loader) {
    Ids sizes, ids;
    for (const auto& [x, y] : loader) {
      sizes.push_back(y.size(0));
      auto yi = y.to_vector<std::int64_t>();
      auto xv = x.to_vector<std::int64_t>();
      for (std::size_t i = 0; i < yi.size(); ++i) EXPECT_EQ(xv[i], 10 * yi[i]);
      ids.insert(ids.end(), yi.begin(), yi.end());
    }
    EXPECT_EQ(sizes, (Ids{3, 1}));
    return ids;
  };
  std::vector<Ids> per_epoch;
  for (std::int64_t e = 0; e < 2; ++e) {
    std::vector<Ids> epoch;
    for (std::int64_t r = 0; r < 3; ++r) {
      samplers[r]->set_epoch(e);
      epoch.push_back(pass(*loaders[r]));
      EXPECT_EQ(epoch.back(), samplers[r]->indices(e));
    }
    Ids all = concat(epoch);
    EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), 10u);  // all, 2 repeated
    per_epoch.push_back(all);
  }
  EXPECT_NE(per_epoch[0], per_epoch[1]);
  // As in PyTorch, without set_epoch the next pass repeats the last epoch's order: the loader's
  // own epoch counter (and set_epoch) does not override the sampler's.
  loaders[0]->set_epoch(7);
  EXPECT_EQ(pass(*loaders[0]), samplers[0]->indices(1));
}

TEST(DistributedSamplerTest, NumReplicasBelowOneIsAValueError) {
  expect_error<ValueError>([] { DistributedSampler(8, 0, 0); }, {"num_replicas", "0"});
  expect_error<ValueError>([] { DistributedSampler(8, -2, 0); }, {"num_replicas", "-2"});
}

TEST(DistributedSamplerTest, RankOutsideTheReplicasIsAValueError) {
  expect_error<ValueError>([] { DistributedSampler(8, 2, 2); },
                           {"rank 2", "[0, 2)", "num_replicas 2"});
  expect_error<ValueError>([] { DistributedSampler(8, 2, -1); }, {"rank -1", "num_replicas 2"});
}

TEST(DistributedSamplerTest, NegativeDatasetSizeIsAValueError) {
  expect_error<ValueError>([] { DistributedSampler(-1, 2, 0); }, {"dataset_size", "-1"});
}

TEST(DistributedSamplerTest, DataLoaderRejectsANullSamplerOrShuffleWithASampler) {
  auto ds = std::make_shared<data::TensorDataset>(arange(4), arange(4));
  expect_error<ValueError>([&] { DataLoader(ds, nullptr, {.batch_size = 2}); }, {"null sampler"});
  auto s = std::make_shared<DistributedSampler>(4, 2, 0);
  expect_error<ValueError>([&] { DataLoader(ds, s, {.batch_size = 2, .shuffle = true}); },
                           {"shuffle"});
  expect_error<ValueError>([&] { DataLoader(ds, s, {.batch_size = 0}); }, {"batch_size"});
}

TEST(ShardRangeTest, TensorSplitSizesLargerFirst) {
  auto range = [](std::int64_t n, std::int64_t parts, std::int64_t part) {
    auto r = data::shard_range(n, parts, part);
    return std::pair{r.start, r.start + r.size};
  };
  using P = std::pair<std::int64_t, std::int64_t>;
  EXPECT_EQ(range(10, 3, 0), (P{0, 4}));
  EXPECT_EQ(range(10, 3, 1), (P{4, 7}));
  EXPECT_EQ(range(10, 3, 2), (P{7, 10}));
  EXPECT_EQ(data::shard_range(2, 3, 0).size, 1);
  EXPECT_EQ(data::shard_range(2, 3, 1).size, 1);
  EXPECT_EQ(data::shard_range(2, 3, 2).size, 0);
  EXPECT_EQ(data::shard_range(2, 3, 2).start, 2);
  EXPECT_EQ(data::shard_range(0, 2, 1).size, 0);
  // Every sample in exactly one part, in order, sizes as tensor_split gives them.
  for (std::int64_t n : {0, 1, 7, 9, 64})
    for (std::int64_t parts : {1, 2, 3, 4, 10}) {
      std::int64_t next = 0;
      auto sizes = split_sizes(n, parts);
      for (std::int64_t p = 0; p < parts; ++p) {
        auto r = data::shard_range(n, parts, p);
        EXPECT_EQ(r.start, next);
        EXPECT_EQ(r.size, sizes[static_cast<std::size_t>(p)]);
        EXPECT_LE(r.size, data::shard_range(n, parts, 0).size);
        EXPECT_GE(r.size, data::shard_range(n, parts, 0).size - 1);
        next += r.size;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(ShardRangeTest, BadArgumentsAreValueErrors) {
  expect_error<ValueError>([] { data::shard_range(-1, 2, 0); }, {"shard_range", "-1"});
  expect_error<ValueError>([] { data::shard_range(10, 0, 0); }, {"parts", "0"});
  expect_error<ValueError>([] { data::shard_range(10, 3, 3); }, {"part 3", "[0, 3)"});
  expect_error<ValueError>([] { data::shard_range(10, 3, -1); }, {"part -1"});
}

}  // namespace
}  // namespace lockstep::testing
