// Every PyTorch golden trajectory in tests/data reproduced on cuda:0 through the same harness as
// tests/golden (run_golden, tests/support/golden.h), within |a − b| ≤ 1e-4 + 1e-4·|b| (issue 6);
// and the same run twice on cuda:0 gives bit-identical losses and parameters (every kernel on
// the path sums in a fixed order and cuBLAS runs with its default, deterministic settings).
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/cuda_test_util.h"
#include "support/golden.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);
constexpr double kGpuTol = 1e-4;

class GoldenCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenCuda, ReproducesPyTorchTrajectoryOnCuda0) {
  LOCKSTEP_REQUIRE_CUDA();
  Golden g = load_golden(GetParam());
  GoldenRun run = run_golden(g, kCuda0);
  EXPECT_TRUE(AllClose(run.step_losses, g.step_losses, kGpuTol, kGpuTol)) << "train_step_losses";
  EXPECT_TRUE(AllClose(run.val_losses, g.val_losses, kGpuTol, kGpuTol)) << "val_loss_per_epoch";
  ASSERT_EQ(run.final_params.size(), g.final_params.size());
  for (const auto& [name, expected] : g.final_params)
    EXPECT_TRUE(AllClose(run.final_params.at(name), expected, kGpuTol, kGpuTol)) << name;
}

TEST_P(GoldenCuda, TwoRunsOnCuda0AreBitIdentical) {
  LOCKSTEP_REQUIRE_CUDA();
  Golden g = load_golden(GetParam());
  GoldenRun a = run_golden(g, kCuda0), b = run_golden(g, kCuda0);
  ASSERT_EQ(a.step_losses.size(), b.step_losses.size());
  for (std::size_t i = 0; i < a.step_losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.step_losses[i], &b.step_losses[i], sizeof(double)), 0)
        << "step " << i << ": " << a.step_losses[i] << " vs " << b.step_losses[i];
  EXPECT_EQ(a.val_losses, b.val_losses);
  for (const auto& [name, value] : a.final_params)
    EXPECT_TRUE(BitEqual(value, b.final_params.at(name))) << name;
}

INSTANTIATE_TEST_SUITE_P(AllGoldenFiles, GoldenCuda, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::testing
