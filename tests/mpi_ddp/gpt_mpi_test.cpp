// nanoGPT's model under DistributedDataParallel over the MPI backend, run by ctest under
// `mpirun -np 2` and `-np 3` (label mpi): each rank trains on its rows of every batch of 4 (on 3
// ranks 2, 1, 1; the ignored targets, all in row 3, on the last rank only) and follows PyTorch's
// trajectory (tests/data/gpt/); in deterministic mode every rank ends with the bits one process
// with one device gets, with 1 and 2 devices per rank.
#include <gtest/gtest.h>

#include "lockstep/dist/mpi.h"
#include "support/gpt_training.h"
#include "support/mpi_gtest_main.h"

namespace lockstep::testing {
namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  static auto group = dist::init_mpi({.timeout_seconds = 60});
  return group;
}

class MpiGpt : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiGpt, RanksFollowPyTorch) {
  const GptGolden g = load_gpt_golden(GetParam());
  expect_gpt_matches(train_gpt(g, {.devices = 1, .group = world()}), g,
                     g.name + ", " + std::to_string(world()->size()) + " ranks, rank " +
                         std::to_string(world()->rank()));
}

TEST_P(MpiGpt, DeterministicModeGivesOneProcesssBits) {
  const GptGolden g = load_gpt_golden(GetParam());
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.shard_size = 1;
  const GptTrained one = train_gpt(g, {.devices = 1, .options = o});
  for (int devices : {1, 2})
    expect_gpt_bits_equal(one, train_gpt(g, {.devices = devices, .options = o, .group = world()}),
                          std::to_string(world()->size()) + " ranks x " +
                              std::to_string(devices) + " devices, rank " +
                              std::to_string(world()->rank()));
}

INSTANTIATE_TEST_SUITE_P(Files, MpiGpt, ::testing::Values("gpt_nobias", "gpt_bias"));

}  // namespace
}  // namespace lockstep::testing

int main(int argc, char** argv) {
  return lockstep::testing::run_mpi_gtest(argc, argv, lockstep::testing::world());
}
