// SyncBatchNorm against PyTorch: the CNN golden files' model with every BatchNorm converted
// (convert_sync_batchnorm) and trained through DataParallel on 1, 2, 3, 4 and 8 devices follows
// PyTorch's ONE-device trajectory (tests/data/cnn/, make_cnn_golden.py: SyncBatchNorm's result
// is BatchNorm's over the whole batch), over forward_backward and the gather path, uneven
// chunks included (8 rows on 3 devices: 3, 3, 2); in deterministic mode the final state is
// bit-identical for every device count, and still PyTorch's to tolerance.
#include <gtest/gtest.h>

#include "support/cnn_training.h"

namespace lockstep::testing {
namespace {

class SyncBnGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SyncBnGoldenTest, DataParallelFollowsOneDevice) {
  const CnnGolden g = load_cnn_golden(GetParam());
  for (int devices : {1, 2, 3, 4, 8})
    for (CnnHow how : {CnnHow::Reducer, CnnHow::Gather}) {
      if (devices == 1 && how == CnnHow::Gather) continue;
      expect_cnn_matches(train_cnn(g, {.devices = devices, .how = how, .sync_bn = true}),
                         g.expected.at(1),
                         g.name + " SyncBatchNorm on " + std::to_string(devices) + " devices, " +
                             (how == CnnHow::Reducer ? "forward_backward" : "gather path"));
    }
}

TEST_P(SyncBnGoldenTest, DeterministicModeIsBitIdenticalForEveryDeviceCount) {
  const CnnGolden g = load_cnn_golden(GetParam());
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.shard_size = 2;  // 4 shards a batch: the shard group has 4 members
  const CnnTrained one = train_cnn(g, {.devices = 1, .sync_bn = true, .options = o});
  expect_cnn_matches(one, g.expected.at(1), g.name + " deterministic, 1 device");
  for (int devices : {2, 3, 4, 8}) {
    const CnnTrained many = train_cnn(g, {.devices = devices, .sync_bn = true, .options = o});
    expect_cnn_bits_equal(one, many, std::to_string(devices) + " devices");
    EXPECT_EQ(many.eval_output, one.eval_output) << devices << " devices";
  }
}

INSTANTIATE_TEST_SUITE_P(Files, SyncBnGoldenTest, ::testing::Values("cnn_sgd_momentum", "cnn_adam"));

}  // namespace
}  // namespace lockstep::testing
