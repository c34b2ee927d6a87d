// The threads backend's asynchronous collectives (one thread per rank): the shared bodies of
// tests/support/async_bodies.h (also run on the mpi backend by tests/mpi/async_mpi_test.cpp),
// then what only an in-process group shows: abort releases started collectives, destroying a
// group waits for its pending ones, and started collectives run off the calling thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/async_bodies.h"

namespace lockstep::testing {
namespace {

namespace ac = async_collectives;

// Odd (uneven slices); small enough for 4 threads on CI's 2 cores under TSan.
constexpr std::int64_t kLarge = 10007;

void on_ranks(int size, const std::function<void(dist::ProcessGroup&)>& body) {
  const auto errors = run_thread_ranks(size, [&](int, const auto& g) { body(*g); });
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(exception_message(errors[static_cast<std::size_t>(r)]), "") << "rank " << r;
}

class ThreadAsync : public ::testing::TestWithParam<int> {};

TEST_P(ThreadAsync, MatchesBlocking) {
  on_ranks(GetParam(), [](dist::ProcessGroup& g) { ac::async_matches_blocking(g, kLarge); });
}

TEST_P(ThreadAsync, MixedOrderMatchesBlocking) {
  on_ranks(GetParam(), ac::mixed_order_matches_blocking);
}

TEST_P(ThreadAsync, BFloat16MatchesEmulation) {
  on_ranks(GetParam(), [](dist::ProcessGroup& g) { ac::bf16_matches_emulation(g, kLarge); });
}

TEST_P(ThreadAsync, ErrorsSurfaceFromWait) {
  if (GetParam() < 2) GTEST_SKIP() << "needs two ranks";
  on_ranks(GetParam(), ac::errors_surface_from_wait);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadAsync, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "_ranks"; });

// A started collective runs on the member's communication thread: rank 0 starts an all_reduce
// that cannot complete before rank 1 joins it, and gets its Work back while rank 1 still waits
// for rank 0's signal (a blocking default would return only once rank 1 gives up waiting, 5 s
// later, with the collective completed).
TEST(ThreadAsyncOnly, StartReturnsBeforeThePeersJoin) {
  auto groups = dist::new_thread_group(2);
  std::atomic<bool> started{false};
  std::thread peer([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!started.load() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::yield();
    Tensor t = full({5}, 2.0);
    groups[1]->all_reduce(t);
  });
  Tensor t = full({5}, 1.0);
  auto work = groups[0]->all_reduce_async(t);
  EXPECT_FALSE(work->is_completed());
  started = true;
  work->wait();
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>(5, 3.0));
  peer.join();
}

// abort() releases a member's started collectives that wait for a peer which never comes: the
// running one and the one queued behind it throw DistError naming the reason from wait().
TEST(ThreadAsyncOnly, AbortReleasesStartedCollectives) {
  auto groups = dist::new_thread_group(2);
  Tensor a = full({4}, 1.0), b = full({4}, 1.0);
  std::vector<Tensor> gathered{zeros({4}), zeros({4})};
  auto first = groups[0]->all_reduce_async(a);
  auto second = groups[0]->all_gather_async(gathered, b);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(first->is_completed());
  groups[0]->abort("rank 1 failed");
  expect_error<DistError>([&] { first->wait(); }, {"aborted", "rank 1 failed"});
  expect_error<DistError>([&] { second->wait(); }, {"aborted", "rank 1 failed"});
  groups[0]->clear_abort();
}

// Destroying the group's members while their started collectives are pending (no wait(), the
// Works dropped) waits for them: the tensors hold the results afterwards.
TEST(ThreadAsyncOnly, DestructionWaitsForPendingCollectives) {
  std::vector<Tensor> results;
  for (int r = 0; r < 3; ++r) results.push_back(full({1001}, double(r + 1)));
  {
    auto groups = dist::new_thread_group(3);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.emplace_back([&, r] {
        for (int k = 0; k < 4; ++k) groups[static_cast<std::size_t>(r)]->all_reduce_async(
            results[static_cast<std::size_t>(r)]);
      });
    for (auto& t : ranks) t.join();
  }  // the members' destructors wait for the 4 all_reduces and join their threads
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(results[static_cast<std::size_t>(r)].to_vector<double>(),
              std::vector<double>(1001, 6.0 * 3 * 3 * 3))
        << "rank " << r;
}

}  // namespace
}  // namespace lockstep::testing
