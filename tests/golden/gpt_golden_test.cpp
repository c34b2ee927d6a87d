// nanoGPT's model against PyTorch (tests/data/gpt/, make_gpt_golden.py: nanoGPT's model.py,
// configure_optimizers and get_lr, 2 layers, 2 heads, 32 wide, block 16, vocabulary 20, batch
// 4, with and without biases, targets of the last row partly ignored): the first forward's
// logits and loss, every parameter's gradient (the tied embedding's the sum of both uses), and
// 5 AdamW steps with clipping and the warmup + cosine schedule, reproduced by the plain module,
// through DataParallel on 1, 2, 3 and 4 devices (the ignored targets all on the last device),
// and in deterministic mode bit for bit for every device count.
#include <gtest/gtest.h>

#include "support/gpt_training.h"

namespace lockstep::testing {
namespace {

class GptGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GptGoldenTest, PlainModuleFollowsPyTorch) {
  const GptGolden g = load_gpt_golden(GetParam());
  expect_gpt_matches(train_gpt(g, {}), g, g.name + " plain module");
}

TEST_P(GptGoldenTest, DataParallelFollowsPyTorch) {
  const GptGolden g = load_gpt_golden(GetParam());
  for (int devices : {1, 2, 3, 4})
    expect_gpt_matches(train_gpt(g, {.devices = devices}), g,
                       g.name + " DataParallel on " + std::to_string(devices) + " devices");
}

TEST_P(GptGoldenTest, DeterministicModeIsBitIdenticalForEveryDeviceCount) {
  const GptGolden g = load_gpt_golden(GetParam());
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.shard_size = 1;  // 4 shards a batch
  const GptTrained one = train_gpt(g, {.devices = 1, .options = o});
  expect_gpt_matches(one, g, g.name + " deterministic, 1 device");
  for (int devices : {2, 3, 4})
    expect_gpt_bits_equal(one, train_gpt(g, {.devices = devices, .options = o}),
                          g.name + " deterministic, " + std::to_string(devices) + " devices");
}

INSTANTIATE_TEST_SUITE_P(Files, GptGoldenTest, ::testing::Values("gpt_nobias", "gpt_bias"));

}  // namespace
}  // namespace lockstep::testing
