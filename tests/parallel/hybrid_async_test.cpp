// HybridGroup's started collectives (DDP's ranks × local replicas, lockstep/dist/detail/hybrid_group.h), over
// in-process threads groups standing in for the ranks: the shared async bodies
// (tests/support/async_bodies.h) on every member, reduce_async to member 0 (DataParallel's
// reducers) bit-identical to the blocking reduce on every rank's replica 0, and the bfloat16 wire
// format applied to each rank's local sum.
#include <gtest/gtest.h>

#include <thread>

#include "lockstep/dist/detail/hybrid_group.h"
#include "support/async_bodies.h"

namespace lockstep::testing {
namespace {

namespace ac = async_collectives;
namespace cb = collectives;

struct Shape2 {
  int ranks, locals;
};

// Runs body(member) on ranks × locals threads; member r · L + l is HybridGroup(local l of rank r,
// rank r of the global group). An exception escaping a body fails the test.
void on_members(Shape2 s, const std::function<void(dist::ProcessGroup&)>& body) {
  auto global = dist::new_thread_group(s.ranks);
  std::vector<std::shared_ptr<dist::ProcessGroup>> members;
  for (int r = 0; r < s.ranks; ++r)
    for (auto& local : dist::new_thread_group(s.locals))
      members.push_back(std::make_shared<dist::detail::HybridGroup>(
          local, global[static_cast<std::size_t>(r)]));
  std::vector<std::string> errors(members.size());
  std::vector<std::thread> threads;
  for (std::size_t m = 0; m < members.size(); ++m)
    threads.emplace_back([&, m] {
      try {
        body(*members[m]);
      } catch (const std::exception& e) {
        errors[m] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (std::size_t m = 0; m < members.size(); ++m) EXPECT_EQ(errors[m], "") << "member " << m;
}

class HybridAsync : public ::testing::TestWithParam<Shape2> {};

TEST_P(HybridAsync, MatchesBlocking) {
  on_members(GetParam(), [](dist::ProcessGroup& g) { ac::async_matches_blocking(g, 1001); });
}

TEST_P(HybridAsync, MixedOrderMatchesBlocking) {
  on_members(GetParam(), ac::mixed_order_matches_blocking);
}

// reduce_async(dst 0), several pending at once, then their blocking twins: every rank's replica 0
// holds the sum (what DataParallel reads), bit-identical to the blocking reduce's.
TEST_P(HybridAsync, ReduceToMemberZeroMatchesBlocking) {
  const int L = GetParam().locals;
  on_members(GetParam(), [L](dist::ProcessGroup& g) {
    std::vector<Tensor> started, blocking;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (std::int64_t numel : cb::sizes(g.size(), 10007)) {
      started.push_back(cb::make<float>(numel, g.rank(), static_cast<std::uint64_t>(numel)));
      blocking.push_back(cb::make<float>(numel, g.rank(), static_cast<std::uint64_t>(numel)));
      works.push_back(g.reduce_async(started.back(), 0));
    }
    for (auto& t : blocking) g.reduce(t, 0);
    for (std::size_t i = 0; i < works.size(); ++i) {
      works[i]->wait();
      if (g.rank() % L == 0) {
        EXPECT_TRUE(cb::same_bits(started[i], blocking[i])) << "member " << g.rank();
      }
    }
  });
}

// bfloat16: each rank's local sum (float32, members in order) rounded, the ranks' values folded
// in float32 in rank order, rounded once; all_reduce_async on every member, reduce_async(dst 0)
// on every rank's replica 0.
TEST_P(HybridAsync, BFloat16RoundsEachRanksLocalSum) {
  const Shape2 s = GetParam();
  const std::int64_t numel = 2001;
  auto round = [](float x) { return dist::from_bfloat16_bits(dist::to_bfloat16_bits(x)); };
  std::vector<float> want(static_cast<std::size_t>(numel));
  for (std::int64_t i = 0; i < numel; ++i) {
    float total = 0;
    for (int r = 0; r < s.ranks; ++r) {
      float local = cb::sample<float>(r * s.locals, i, 5);
      for (int l = 1; l < s.locals; ++l) local += cb::sample<float>(r * s.locals + l, i, 5);
      total = r == 0 ? round(local) : total + round(local);
    }
    want[static_cast<std::size_t>(i)] = round(total);
  }
  on_members(s, [&](dist::ProcessGroup& g) {
    Tensor a = cb::make<float>(numel, g.rank(), 5), b = cb::make<float>(numel, g.rank(), 5);
    auto wa = g.all_reduce_async(a, dist::ReduceOp::Sum, dist::WireFormat::BFloat16);
    auto wb = g.reduce_async(b, 0, dist::ReduceOp::Sum, dist::WireFormat::BFloat16);
    wa->wait();
    wb->wait();
    EXPECT_TRUE(cb::same_bits(a, want)) << "all_reduce_async, member " << g.rank();
    if (g.rank() % s.locals == 0) {
      EXPECT_TRUE(cb::same_bits(b, want)) << "reduce_async, member " << g.rank();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, HybridAsync,
                         ::testing::Values(Shape2{2, 1}, Shape2{1, 3}, Shape2{2, 2}, Shape2{3, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "_ranks_" +
                                  std::to_string(info.param.locals) + "_locals";
                         });

}  // namespace
}  // namespace lockstep::testing
