// ProcessGroup collectives on the threads backend (one thread per rank). The test bodies are
// shared with the mpi backend's tests (tests/mpi): tests/support/collective_bodies.h.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/collective_bodies.h"

namespace lockstep::testing {
namespace {

namespace cb = collectives;

// Largest tensor of the shared bodies here (odd, so slices are uneven on 2, 4 and 8 ranks);
// smaller on 8 ranks, whose 8 threads share CI's 2 cores (also under TSan).
std::int64_t large(int ranks) { return ranks >= 8 ? 10007 : 100003; }

// Runs body(group) on `size` threads, one rank each; an exception escaping a body fails the test.
void on_ranks(int size, const std::function<void(dist::ProcessGroup&)>& body) {
  const auto errors = run_thread_ranks(size, [&](int, const auto& g) { body(*g); });
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(exception_message(errors[static_cast<std::size_t>(r)]), "") << "rank " << r;
}

class ThreadCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ThreadCollectives, SmallExactValues) { on_ranks(GetParam(), cb::small_exact_values); }

TEST_P(ThreadCollectives, AllReduceMatchesRankOrder) {
  on_ranks(GetParam(),
           [](dist::ProcessGroup& g) { cb::all_reduce_matches_rank_order(g, large(g.size())); });
}

TEST_P(ThreadCollectives, ReduceMatchesRankOrderOnTheDestination) {
  on_ranks(GetParam(),
           [](dist::ProcessGroup& g) { cb::reduce_matches_rank_order(g, large(g.size())); });
}

TEST_P(ThreadCollectives, ReduceScatterMatchesRankOrder) {
  on_ranks(GetParam(), [](dist::ProcessGroup& g) {
    cb::reduce_scatter_matches_rank_order(g, large(g.size()));
  });
}

TEST_P(ThreadCollectives, BroadcastFromEveryRoot) {
  on_ranks(GetParam(),
           [](dist::ProcessGroup& g) { cb::broadcast_from_every_root(g, large(g.size())); });
}

TEST_P(ThreadCollectives, AllGatherCollectsEveryRank) {
  on_ranks(GetParam(),
           [](dist::ProcessGroup& g) { cb::all_gather_collects_every_rank(g, large(g.size())); });
}

TEST_P(ThreadCollectives, BarrierWaitsForEveryRank) {
  on_ranks(GetParam(), cb::barrier_waits_for_every_rank);
}

TEST_P(ThreadCollectives, MismatchFailsOnEveryRank) {
  if (GetParam() < 2) GTEST_SKIP() << "needs two ranks";
  on_ranks(GetParam(), cb::mismatch_fails_on_every_rank);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "_ranks"; });

TEST(Backends, ThreadsAlwaysMpiAndNcclWhenBuilt) {
  auto names = dist::available_backends();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "threads");
  EXPECT_EQ(std::find(names.begin(), names.end(), "mpi") != names.end(), dist::mpi_available());
  EXPECT_EQ(std::find(names.begin(), names.end(), "nccl") != names.end(), dist::nccl_available());
#ifdef LOCKSTEP_HAS_CUDA
  EXPECT_TRUE(dist::nccl_available());
  EXPECT_FALSE(dist::nccl_version().empty());
#else
  EXPECT_FALSE(dist::nccl_available());
  EXPECT_TRUE(dist::nccl_version().empty());
#endif
}

// A member that fails aborts the group: the others, waiting in a collective or entering one,
// throw DistError with its reason; once every member has left, clear_abort() makes the group
// work again.
TEST(ThreadGroupAbort, ReleasesTheWaitersUntilCleared) {
  auto group = dist::new_thread_group(3);
  std::vector<std::string> seen(3);
  std::vector<std::thread> waiters;
  for (int r : {0, 1})
    waiters.emplace_back([&, r] {
      Tensor t = ones({4});
      try {
        group[static_cast<std::size_t>(r)]->all_reduce(t);
      } catch (const DistError& e) {
        seen[static_cast<std::size_t>(r)] = e.what();
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // both usually asleep by now
  group[2]->abort("rank 2 failed: bad label");
  for (auto& w : waiters) w.join();
  for (int r : {0, 1})
    EXPECT_NE(seen[static_cast<std::size_t>(r)].find("aborted: rank 2 failed: bad label"),
              std::string::npos)
        << "rank " << r << ": " << seen[static_cast<std::size_t>(r)];
  expect_error<DistError>([&] { group[1]->barrier(); }, {"rank 2 failed"});
  group[0]->clear_abort();
  std::vector<double> sums(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      Tensor t = full({1}, static_cast<float>(r + 1));
      group[static_cast<std::size_t>(r)]->all_reduce(t);
      sums[static_cast<std::size_t>(r)] = t.item();
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(sums, std::vector<double>(3, 6.0));
}

#ifndef LOCKSTEP_HAS_CUDA
// Without the CUDA backend both ways of making an NCCL group say so.
TEST(Backends, NcclWithoutTheBackendIsDistError) {
  expect_error<DistError>([] { (void)dist::new_nccl_group({Device(DeviceType::CUDA, 0)}); },
                          {"no NCCL backend", "LOCKSTEP_CUDA=ON"});
  auto threads = dist::new_thread_group(1);
  expect_error<DistError>(
      [&] { (void)dist::new_nccl_group(threads[0], Device(DeviceType::CUDA, 0)); },
      {"no NCCL backend"});
}
#endif

}  // namespace
}  // namespace lockstep::testing
