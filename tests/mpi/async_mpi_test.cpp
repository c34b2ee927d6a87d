// The mpi backend's asynchronous collectives, one process per rank (ctest mpi.async_np2 and
// _np3): the shared bodies of tests/support/async_bodies.h (also run on the threads backend by
// tests/dist/async_collectives_test.cpp), with the bfloat16 wire format moving two-byte elements
// for real here, and the overlap itself: a started all_reduce completes while the calling thread
// computes without touching the group. Timeouts and failed peers seen from wait() are mpi_fault
// jobs (tests/mpi/fault_test.sh, modes stop_async and notify_async).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "support/async_bodies.h"
#include "support/mpi_gtest_main.h"

namespace lockstep::testing {
namespace {

namespace ac = async_collectives;

constexpr std::int64_t kLarge = 100003;

dist::ProcessGroup& g() {
  static auto group = dist::init_mpi({.timeout_seconds = 60});
  return *group;
}

TEST(MpiAsync, MatchesBlocking) { ac::async_matches_blocking(g(), kLarge); }
TEST(MpiAsync, MixedOrderMatchesBlocking) { ac::mixed_order_matches_blocking(g()); }
TEST(MpiAsync, BFloat16MatchesEmulation) { ac::bf16_matches_emulation(g(), kLarge); }
TEST(MpiAsync, ErrorsSurfaceFromWait) {
  if (g().size() < 2) GTEST_SKIP() << "needs a rank 1 whose tensor differs";
  ac::errors_surface_from_wait(g());
}

// Without the argument exchange (no MPI_Iallgather of the call descriptions first) the started
// collectives give the same bits too.
TEST(MpiAsync, MatchesBlockingWithoutArgumentChecks) {
  dist::init_mpi({.timeout_seconds = 60, .check_arguments = false});
  ac::async_matches_blocking(g(), 1001);
  ac::bf16_matches_emulation(g(), 1001);
  dist::init_mpi({.timeout_seconds = 60, .check_arguments = true});
}

// The overlap: every rank but 0 starts a 4 MiB all_reduce 1 s after a barrier, so rank 0's
// all_reduce_async must return before the collective can complete (a blocking default returns
// after about 1 s, completed). Each rank then computes (no call into the group) until the Work
// reports completion, which only the communication thread's progress can bring about; the
// result is the blocking all_reduce's.
TEST(MpiAsync, AllReduceCompletesWhileTheCallerComputes) {
  const int r = g().rank(), n = g().size();
  const std::int64_t numel = 1 << 20;
  Tensor t = collectives::make<float>(numel, r, 42);
  g().barrier();
  if (r != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
  auto work = g().all_reduce_async(t);
  if (r == 0 && n > 1) {
    EXPECT_FALSE(work->is_completed()) << "all_reduce_async waited for the peers";
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  volatile double sink = 0;  // the computation is not optimised away
  while (!work->is_completed() && std::chrono::steady_clock::now() < give_up)
    for (int i = 1; i < 100000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
  EXPECT_TRUE(work->is_completed()) << "no progress without wait() on rank " << r;
  work->wait();
  EXPECT_TRUE(collectives::same_bits(
      t, collectives::rank_order<float>(dist::ReduceOp::Sum, n, numel, 42)))
      << "rank " << r;
}

}  // namespace
}  // namespace lockstep::testing

int main(int argc, char** argv) {
  auto group = lockstep::dist::init_mpi({.timeout_seconds = 60});
  return lockstep::testing::run_mpi_gtest(argc, argv, group);
}
