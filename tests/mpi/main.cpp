// main() of test_mpi, run under mpirun (ctest: mpi.collectives_np1/np2/np4): initialises MPI
// once, runs the tests on every rank, finalises MPI. Rank 0 prints GoogleTest's usual report;
// the other ranks print only their failures, prefixed with "[rank k]". Each test also fails on
// every rank when it failed on any (MpiTest::TearDown), so rank 0's report covers all ranks.
#include <gtest/gtest.h>

#include <cstdio>

#include "lockstep/lockstep.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A generous timeout: 4 ranks share 2 cores in CI, next to other tests.
  auto group = lockstep::dist::init_mpi({.timeout_seconds = 60});
  if (group->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(group->rank()));
  }
  const int status = RUN_ALL_TESTS();
  lockstep::dist::finalize_mpi();
  return status;
}
