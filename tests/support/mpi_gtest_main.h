// The main() body of a GoogleTest program run under mpirun (tests/mpi_ddp): every rank runs the
// tests, only rank 0 prints the report, and the process fails on every rank if any rank failed;
// MPI is finalized at the end.
#pragma once

#include <gtest/gtest.h>

#include "lockstep/dist/mpi.h"
#include "lockstep/lockstep.h"

namespace lockstep::testing {

inline int run_mpi_gtest(int argc, char** argv, const std::shared_ptr<dist::ProcessGroup>& group) {
  ::testing::InitGoogleTest(&argc, argv);
  if (group->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  std::int64_t failed = RUN_ALL_TESTS();
  Tensor t = tensor(std::span<const std::int64_t>(&failed, 1));
  group->all_reduce(t, dist::ReduceOp::Max);
  const bool any = t.to_vector<std::int64_t>()[0] != 0;
  dist::finalize_mpi();
  return any ? 1 : 0;
}

}  // namespace lockstep::testing
