// The CNN golden trajectories (tests/data/cnn/, PyTorch's numbers): a small CNN with BatchNorm
// trained with SGD + momentum and with Adam reproduces PyTorch's losses, layer 1's running_mean
// after every step, the final parameters and buffers (num_batches_tracked exactly) and the
// eval-mode output: as a plain module, through DataParallel on one device, and on 2 and 3
// devices against PyTorch run chunk by chunk as DataParallel runs it (make_cnn_golden.py), over
// forward_backward and over the gather path.
#include <gtest/gtest.h>

#include "support/cnn_training.h"

namespace lockstep::testing {
namespace {

class CnnGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CnnGoldenTest, OneDeviceMatchesPyTorch) {
  const CnnGolden g = load_cnn_golden(GetParam());
  expect_cnn_matches(train_cnn(g, {.how = CnnHow::Module}), g.expected.at(1), g.name + " module");
  expect_cnn_matches(train_cnn(g, {.how = CnnHow::Reducer}), g.expected.at(1),
                     g.name + " DataParallel(cpu:0)");
}

TEST_P(CnnGoldenTest, DataParallelMatchesPyTorchChunkByChunk) {
  const CnnGolden g = load_cnn_golden(GetParam());
  for (int devices : {2, 3})
    for (CnnHow how : {CnnHow::Reducer, CnnHow::Gather})
      expect_cnn_matches(train_cnn(g, {.devices = devices, .how = how}), g.expected.at(devices),
                         g.name + " on " + std::to_string(devices) + " devices, " +
                             (how == CnnHow::Reducer ? "forward_backward" : "gather path"));
}

INSTANTIATE_TEST_SUITE_P(Files, CnnGoldenTest,
                         ::testing::Values("cnn_sgd_momentum", "cnn_adam"));

}  // namespace
}  // namespace lockstep::testing
