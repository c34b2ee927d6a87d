// DistributedDataParallel's buffers over the MPI backend, run by ctest under `mpirun -np 2` and
// `-np 3` (label mpi): the broadcast_buffers gate and join() with ranks as processes; the same
// bodies run with ranks as threads in tests/parallel/buffers_test.cpp.
#include <gtest/gtest.h>

#include "lockstep/dist/mpi.h"
#include "support/buffer_probe.h"

namespace lockstep::testing {
namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  static auto group = dist::init_mpi({.timeout_seconds = 30});
  return group;
}

TEST(MpiBuffers, BroadcastFollowsPyTorchsGate) {
  for (bool broadcast : {true, false}) ddp_buffer_gate_body(world()->rank(), world(), broadcast);
}

TEST(MpiBuffers, JoinHandsTheLowestActiveRanksBuffersToEveryRank) {
  for (int early : {0, world()->size() - 1}) ddp_buffer_join_body(world()->rank(), world(), early);
}

}  // namespace
}  // namespace lockstep::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto group = lockstep::testing::world();
  if (group->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  // A failure on any rank fails every rank's exit status.
  std::int64_t failed = RUN_ALL_TESTS();
  lockstep::Tensor t = lockstep::tensor(std::span<const std::int64_t>(&failed, 1));
  group->all_reduce(t, lockstep::dist::ReduceOp::Max);
  const bool any = t.to_vector<std::int64_t>()[0] != 0;
  lockstep::dist::finalize_mpi();
  return any ? 1 : 0;
}
