// Every PyTorch golden trajectory in tests/data is reproduced on one device: per-step training
// losses, per-epoch validation losses and final parameters, all within allclose.
#include <gtest/gtest.h>

#include "support/golden.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, ReproducesPyTorchTrajectory) {
  Golden g = load_golden(GetParam());
  GoldenRun run = run_golden(g, cpu());  // tests/cuda/golden_cuda_test.cpp: the same on cuda:0
  EXPECT_TRUE(AllClose(run.step_losses, g.step_losses)) << "train_step_losses";
  EXPECT_TRUE(AllClose(run.val_losses, g.val_losses)) << "val_loss_per_epoch";
  ASSERT_EQ(run.final_params.size(), g.final_params.size());
  for (const auto& [name, expected] : g.final_params)
    EXPECT_TRUE(AllClose(run.final_params.at(name), expected)) << name;
}

INSTANTIATE_TEST_SUITE_P(AllGoldenFiles, GoldenTest, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::testing
