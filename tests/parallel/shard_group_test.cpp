// Deterministic mode's process group: while shard s runs, dist::current_group() has the step's
// shards as members in global shard order, whatever the spread over devices and ranks, so a
// collective in forward (and in backward) meets every shard and gives the same bits for 1, 2
// and 3 devices, over DataParallel's forward_backward, its gather path, and DDP's ranks; a module
// that runs collectives without declaring it gets an error naming the fix instead of a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "lockstep/autograd/node.h"
#include "lockstep/dist/current_group.h"
#include "lockstep/parallel/distributed.h"
#include "lockstep/dist/detail/shard_group.h"
#include "support/collective_probe.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

Tensor mse(const Tensor& out, const Tensor& y) { return mse_loss(out, y); }

struct Trained {
  std::vector<float> params;
  std::vector<CollectiveProbe::Entry> log;
};

parallel::DataParallelOptions deterministic(std::int64_t shard_size) {
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.shard_size = shard_size;
  return o;
}

// Two SGD steps on 10 rows in shards of 2 (five shards: 3 devices hold 2, 2 and 1).
Trained train(int devices, bool gather) {
  manual_seed(4);
  auto probe = std::make_shared<CollectiveProbe>();
  parallel::DataParallel dp(probe, cpus(devices), std::nullopt, deterministic(2));
  optim::SGD sgd(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  manual_seed(6);
  Tensor x = randn({10, 3}), y = randn({10, 2});
  for (int step = 0; step < 2; ++step) {
    sgd.zero_grad();
    if (gather)
      mse(dp.forward(x), y).backward();
    else
      dp.forward_backward(x, y, mse);
    sgd.step();
  }
  Trained r;
  for (auto& p : probe->parameters()) {
    auto v = p.to_vector<float>();
    r.params.insert(r.params.end(), v.begin(), v.end());
  }
  r.log = *probe->log;
  return r;
}

// Two steps, each with a forward and a backward collective on every member: each member rank
// 0..4 of a group of 5 seen twice per pass.
void expect_every_shard(const Trained& r) {
  ASSERT_EQ(r.log.size(), 2u * 5u * 2u);
  for (bool backward : {false, true}) {
    std::vector<int> seen(5, 0);
    for (const auto& e : r.log) {
      if (e.backward != backward) continue;
      EXPECT_EQ(e.size, 5);
      ASSERT_GE(e.rank, 0);
      ASSERT_LT(e.rank, 5);
      ++seen[static_cast<std::size_t>(e.rank)];
    }
    EXPECT_EQ(seen, std::vector<int>(5, 2)) << "backward " << backward;
  }
}

TEST(ShardGroup, ForwardBackwardCollectivesMeetEveryShardAndAgreeAcrossDeviceCounts) {
  for (bool gather : {false, true}) {
    SCOPED_TRACE(gather ? "gather path" : "forward_backward");
    const Trained one = train(1, gather);
    expect_every_shard(one);
    for (int devices : {2, 3}) {
      SCOPED_TRACE("devices " + std::to_string(devices));
      const Trained many = train(devices, gather);
      expect_every_shard(many);
      EXPECT_EQ(many.params, one.params);
      // The same global values, bit for bit, in every member of every step.
      std::vector<double> a, b;
      for (const auto& e : one.log) a.push_back(e.value);
      for (const auto& e : many.log) b.push_back(e.value);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b);
    }
  }
}

TEST(ShardGroup, SumsInShardOrderAcrossRanks) {
  // Two ranks of two shards each, whose float32 sum depends on the order: in member order
  // ((x0 + x1) + x2) + x3 = 0.3, where summing each rank's first, (x0 + x1) + (x2 + x3), gives 0.
  const std::vector<float> xs = {0.3f, 1e8f, -1e8f, 0.3f};
  std::vector<double> got(4, -1);
  run_ranks(2, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& ranks) {
    auto locals = dist::new_thread_group(2);
    std::vector<std::thread> shards;
    for (int l = 0; l < 2; ++l)
      shards.emplace_back([&, l] {
        const auto s = static_cast<std::size_t>(2 * rank + l);
        dist::detail::ShardGroup group(locals[static_cast<std::size_t>(l)], ranks, {2, 2});
        EXPECT_EQ(group.rank(), static_cast<int>(s));
        Tensor t = full({1}, xs[s]);
        group.all_reduce(t, dist::ReduceOp::Sum);
        got[s] = t.item();
      });
    for (auto& t : shards) t.join();
  });
  for (double g : got) EXPECT_EQ(g, static_cast<double>(0.3f));
}

TEST(ShardGroup, UndeclaredCollectiveNamesTheFix) {
  auto probe = std::make_shared<CollectiveProbe>();
  probe->declares = false;
  parallel::DataParallel dp(probe, cpus(2), std::nullopt, deterministic(2));
  expect_error<Error>([&] { dp.forward_backward(randn({8, 3}), randn({8, 2}), mse); },
                      {"cpu:", "all_reduce", "deterministic mode", "runs_collectives()"});
}

TEST(ShardGroup, DistributedRanksAreOneGroupOfTheGlobalShards) {
  // 2 ranks of 2 devices with 6 and 4 rows (3 + 2 shards of 2) equal one process with the 10
  // rows; rank 0's shards are members 0-2, rank 1's 3-4.
  const Trained one = train(1, false);
  manual_seed(4);
  const auto init = std::make_shared<CollectiveProbe>();
  std::vector<std::vector<float>> params(2);
  std::vector<std::vector<CollectiveProbe::Entry>> logs(2);
  run_ranks(2, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
    auto probe = std::make_shared<CollectiveProbe>();  // rank 0's parameters reach every rank
    parallel::DistributedDataParallelOptions o;
    o.deterministic = true;
    o.shard_size = 2;
    o.device_ids = cpus(2);
    if (rank == 0) probe->load_state_dict(init->state_dict());
    parallel::DistributedDataParallel ddp(probe, group, o);
    optim::SGD sgd(ddp.parameters(), optim::SGDOptions{.lr = 0.1});
    Generator gen(6);
    Tensor x = randn({10, 3}, {}, &gen), y = randn({10, 2}, {}, &gen);
    const std::int64_t start = rank == 0 ? 0 : 6, rows = rank == 0 ? 6 : 4;
    for (int step = 0; step < 2; ++step) {
      sgd.zero_grad();
      ddp.forward_backward(narrow(x, 0, start, rows), narrow(y, 0, start, rows), mse);
      sgd.step();
    }
    for (auto& p : probe->parameters()) {
      auto v = p.to_vector<float>();
      params[static_cast<std::size_t>(rank)].insert(params[static_cast<std::size_t>(rank)].end(),
                                                    v.begin(), v.end());
    }
    logs[static_cast<std::size_t>(rank)] = *probe->log;
  });
  EXPECT_EQ(params[0], one.params);
  EXPECT_EQ(params[1], one.params);
  for (int rank : {0, 1})
    for (const auto& e : logs[static_cast<std::size_t>(rank)]) {
      EXPECT_EQ(e.size, 5);
      EXPECT_TRUE(rank == 0 ? e.rank < 3 : e.rank >= 3) << "rank " << rank << " member " << e.rank;
    }
}

TEST(ShardGroup, DistributedRankWithoutShardsIsRefusedOnEveryRank) {
  auto errors = run_thread_ranks(2, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
    auto probe = std::make_shared<CollectiveProbe>();
    parallel::DistributedDataParallelOptions o;
    o.deterministic = true;
    o.shard_size = 2;
    parallel::DistributedDataParallel ddp(probe, group, o);
    const std::int64_t rows = rank == 0 ? 4 : 0;
    ddp.forward_backward(zeros({rows, 3}), zeros({rows, 2}), mse);
  });
  for (int rank : {0, 1}) {
    const std::string msg = exception_message(errors[static_cast<std::size_t>(rank)]);
    EXPECT_NE(msg.find("rank 1 has no shard"), std::string::npos) << "rank " << rank << ": " << msg;
  }
}

}  // namespace
}  // namespace lockstep::testing
