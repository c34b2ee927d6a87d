// SyncBatchNorm under DistributedDataParallel over the MPI backend, run by ctest under
// `mpirun -np 2` and `-np 3` (label mpi): the CNN golden files' model (tests/data/cnn/) with
// every BatchNorm converted, each rank training on its part of every batch of 8 (uneven on 3
// ranks: 3, 3, 2), with 1 and 2 devices per rank (ranks × devices), follows PyTorch's ONE-device
// trajectory; in deterministic mode every rank ends with the bits one process with one device
// gets.
#include <gtest/gtest.h>

#include "lockstep/dist/mpi.h"
#include "support/cnn_training.h"
#include "support/mpi_gtest_main.h"

namespace lockstep::testing {
namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  static auto group = dist::init_mpi({.timeout_seconds = 60});
  return group;
}

class MpiSyncBn : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiSyncBn, RanksTimesDevicesFollowOneDevice) {
  const CnnGolden g = load_cnn_golden(GetParam());
  for (int devices : {1, 2})
    expect_cnn_matches(
        train_cnn(g, {.devices = devices, .sync_bn = true, .group = world()}), g.expected.at(1),
        g.name + " SyncBatchNorm, " + std::to_string(world()->size()) + " ranks x " +
            std::to_string(devices) + " devices, rank " + std::to_string(world()->rank()));
}

TEST_P(MpiSyncBn, DeterministicModeGivesOneProcesssBits) {
  const CnnGolden g = load_cnn_golden(GetParam());
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.shard_size = 2;
  const CnnTrained one = train_cnn(g, {.devices = 1, .sync_bn = true, .options = o});
  for (int devices : {1, 2}) {
    const CnnTrained many =
        train_cnn(g, {.devices = devices, .sync_bn = true, .options = o, .group = world()});
    expect_cnn_bits_equal(one, many, std::to_string(devices) + " devices per rank");
  }
}

INSTANTIATE_TEST_SUITE_P(Files, MpiSyncBn, ::testing::Values("cnn_sgd_momentum", "cnn_adam"));

}  // namespace
}  // namespace lockstep::testing

int main(int argc, char** argv) {
  return lockstep::testing::run_mpi_gtest(argc, argv, lockstep::testing::world());
}
