// Every PyTorch golden trajectory in tests/data reproduced on cuda:0 through the same harness as
// tests/golden (run_golden, tests/support/golden.h), within |a − b| ≤ 1e-4 + 1e-4·|b| (issue 6);
// and the same run twice on cuda:0 gives bit-identical losses and parameters (every kernel on
// the path sums in a fixed order and cuBLAS runs with its default, deterministic settings).
#include <gtest/gtest.h>

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
  expect_golden(run, g, "", kGpuTol, kGpuTol);
}

TEST_P(GoldenCuda, TwoRunsOnCuda0AreBitIdentical) {
  LOCKSTEP_REQUIRE_CUDA();
  Golden g = load_golden(GetParam());
  expect_bit_identical(run_golden(g, kCuda0), run_golden(g, kCuda0));
}

INSTANTIATE_TEST_SUITE_P(AllGoldenFiles, GoldenCuda, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::testing
