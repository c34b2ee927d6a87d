// DistributedDataParallel's buffers over the MPI backend, run by ctest under `mpirun -np 2` and
// `-np 3` (label mpi): the broadcast_buffers gate and join() with ranks as processes; the same
// bodies run with ranks as threads in tests/parallel/buffers_test.cpp.
#include <gtest/gtest.h>

#include "lockstep/dist/mpi.h"
#include "support/buffer_probe.h"
#include "support/mpi_gtest_main.h"

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
  return lockstep::testing::run_mpi_gtest(argc, argv, lockstep::testing::world());
}
