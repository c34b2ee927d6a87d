// The mpi ProcessGroup backend, one process per rank under mpirun (ctest runs this executable
// with -np 1, 2 and 4): the shared collective bodies (tests/support/collective_bodies.h, also
// run on the threads backend by tests/dist), then what only the mpi backend does: argument
// agreement across processes, options, and the entry points of lockstep/dist/mpi.h. Timeouts
// and dead ranks end the group, so they are tested by separate jobs (mpi_fault, fault_test.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "support/collective_bodies.h"

namespace lockstep::testing {
namespace {

namespace cb = collectives;

// Largest tensor of the shared bodies (odd: uneven slices on 2 and 4 ranks).
constexpr std::int64_t kLarge = 1000003;

class Mpi : public ::testing::Test {
 protected:
  void SetUp() override { g_ = dist::init_mpi({.timeout_seconds = 60}); }
  // A test that failed on any rank fails on every rank, so rank 0's report is complete.
  void TearDown() override {
    Tensor failed = scalar_tensor(HasFailure() ? 1 : 0, kInt64);
    g_->all_reduce(failed, dist::ReduceOp::Max);
    if (failed.item() != 0 && !HasFailure()) ADD_FAILURE() << "failed on another rank";
  }
  dist::ProcessGroup& g() { return *g_; }
  std::shared_ptr<dist::ProcessGroup> g_;
};

TEST_F(Mpi, GroupMatchesTheLauncher) {
  EXPECT_EQ(g().backend(), "mpi");
  EXPECT_TRUE(dist::mpi_available());
  auto names = dist::available_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "mpi"), names.end());
  EXPECT_TRUE(dist::launched_by_mpi());
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  ASSERT_NE(size, nullptr);
  ASSERT_NE(rank, nullptr);
  EXPECT_EQ(g().size(), std::atoi(size));
  EXPECT_EQ(g().rank(), std::atoi(rank));
  EXPECT_TRUE(dist::mpi_unresponsive_ranks().empty());
}

TEST_F(Mpi, InitAgainReturnsTheSameGroup) {
  EXPECT_EQ(dist::init_mpi({.timeout_seconds = 60}).get(), g_.get());
  expect_error<ValueError>([] { dist::init_mpi({.timeout_seconds = 0}); }, {"timeout_seconds"});
  expect_error<ValueError>([] { dist::init_mpi({.timeout_seconds = -1}); }, {"timeout_seconds"});
  expect_error<ValueError>(
      [] { dist::init_mpi({.timeout_seconds = std::numeric_limits<double>::quiet_NaN()}); },
      {"timeout_seconds"});
}

TEST_F(Mpi, SmallExactValues) { cb::small_exact_values(g()); }
TEST_F(Mpi, AllReduceMatchesRankOrder) { cb::all_reduce_matches_rank_order(g(), kLarge); }
TEST_F(Mpi, ReduceMatchesRankOrderOnTheDestination) { cb::reduce_matches_rank_order(g(), kLarge); }
TEST_F(Mpi, ReduceScatterMatchesRankOrder) { cb::reduce_scatter_matches_rank_order(g(), kLarge); }
TEST_F(Mpi, BroadcastFromEveryRoot) { cb::broadcast_from_every_root(g(), kLarge); }
TEST_F(Mpi, AllGatherCollectsEveryRank) { cb::all_gather_collects_every_rank(g(), kLarge); }
// Empty tensors and fewer elements than ranks: some ranks own empty slices (0-byte transfers).
TEST_F(Mpi, EmptyAndTinyTensors) {
  const int r = g().rank(), size = g().size();
  for (std::int64_t n : {0, 1, 2, 3}) {
    Tensor t = full({n}, r + 1.0);
    g().all_reduce(t);
    EXPECT_EQ(t.to_vector<double>(), std::vector<double>(static_cast<std::size_t>(n),
                                                         size * (size + 1) / 2.0))
        << "n " << n << " rank " << r;
    Tensor b = full({n}, r == 0 ? 7.0 : -1.0);
    g().broadcast(b, 0);
    EXPECT_EQ(b.to_vector<double>(), std::vector<double>(static_cast<std::size_t>(n), 7.0));
    std::vector<Tensor> outs;
    for (int i = 0; i < size; ++i) outs.push_back(zeros({n}));
    g().all_gather(outs, full({n}, r));
    for (int i = 0; i < size; ++i)
      EXPECT_EQ(outs[static_cast<std::size_t>(i)].to_vector<double>(),
                std::vector<double>(static_cast<std::size_t>(n), i));
    std::vector<Tensor> ins;
    for (int i = 0; i < size; ++i) ins.push_back(full({n}, 1.0));
    Tensor out = zeros({n});
    g().reduce_scatter(out, ins);
    EXPECT_EQ(out.to_vector<double>(), std::vector<double>(static_cast<std::size_t>(n), size));
    Tensor a = full({n}, 2.0);
    g().all_reduce_async(a)->wait();
    EXPECT_EQ(a.to_vector<double>(), std::vector<double>(static_cast<std::size_t>(n), 2.0 * size));
  }
}

TEST_F(Mpi, BarrierWaitsForEveryRank) { cb::barrier_waits_for_every_rank(g()); }

TEST_F(Mpi, MismatchFailsOnEveryRank) {
  if (g().size() < 2) GTEST_SKIP() << "needs two ranks";
  cb::mismatch_fails_on_every_rank(g());
}

// Without the argument exchange the collectives take another path (no MPI_Iallgather first;
// MPI_Ibarrier for barrier): the same results.
TEST_F(Mpi, WithoutArgumentChecks) {
  dist::init_mpi({.timeout_seconds = 60, .check_arguments = false});
  cb::small_exact_values(g());
  cb::all_reduce_matches_rank_order(g(), 10001);
  cb::barrier_waits_for_every_rank(g());
  dist::init_mpi({.timeout_seconds = 60, .check_arguments = true});
}

TEST_F(Mpi, DifferentCollectivesFailOnEveryRank) {
  if (g().size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = zeros({4});
  expect_error<DistError>(
      [&] {
        if (g().rank() == 1)
          g().broadcast(t, 0);
        else
          g().all_reduce(t);
      },
      {"different collectives", "rank 1 called broadcast", "rank 0 called all_reduce"});
  g().barrier();  // still usable
}

TEST_F(Mpi, DifferentRootsOrOpsFailOnEveryRank) {
  if (g().size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor t = zeros({4});
  expect_error<DistError>([&] { g().broadcast(t, g().rank() == 1 ? 1 : 0); },
                          {"rank 1 passed root 1", "rank 0 passed root 0"});
  expect_error<DistError>(
      [&] { g().all_reduce(t, g().rank() == 1 ? dist::ReduceOp::Max : dist::ReduceOp::Sum); },
      {"rank 1 passed reduce op Max", "rank 0 passed reduce op Sum"});
  Tensor ok = full({2}, 1.0);
  g().all_reduce(ok);
  EXPECT_EQ(ok.to_vector<double>(), std::vector<double>(2, g().size()));
}

// One rank's bad arguments: that rank throws its own error, every other rank the same type
// naming it, and no rank runs the collective.
TEST_F(Mpi, OneRanksBadArgumentsFailEveryRank) {
  const int r = g().rank(), n = g().size();
  std::vector<Tensor> outs;
  for (int k = 0; k < (r == n - 1 ? n + 1 : n); ++k) outs.push_back(zeros({2}));
  if (r == n - 1)
    expect_error<ValueError>([&] { g().all_gather(outs, zeros({2})); },
                             {"all_gather on rank", "expected " + std::to_string(n) + " outputs"});
  else
    expect_error<ValueError>([&] { g().all_gather(outs, zeros({2})); },
                             {"rank " + std::to_string(n - 1) + " rejected its arguments"});

  std::vector<Tensor> ins;
  for (int k = 0; k < n; ++k) ins.push_back(zeros({k == 0 && r == 0 ? 3 : 2}));
  Tensor out = zeros({2});
  expect_error<ShapeError>([&] { g().reduce_scatter(out, ins); }, {"rank 0"});

  Tensor b = zeros({2}, r == 0 ? kInt64 : kFloat32);
  std::vector<Tensor> gathered;
  for (int k = 0; k < n; ++k) gathered.push_back(zeros({2}));
  expect_error<DTypeError>([&] { g().all_gather(gathered, b); }, {"rank 0"});

  Tensor c = zeros({2});
  expect_error<ValueError>([&] { g().broadcast(c, n); }, {"root " + std::to_string(n)});

  Tensor ok = full({2}, 1.0);
  g().all_reduce(ok);
  EXPECT_EQ(ok.to_vector<double>(), std::vector<double>(2, n));
}

}  // namespace
}  // namespace lockstep::testing
