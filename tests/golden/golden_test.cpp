// Every PyTorch golden trajectory in tests/data is reproduced on one device: per-step training
// losses, per-epoch validation losses and final parameters, all within allclose.
#include "support/golden.h"

#include <gtest/gtest.h>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, ReproducesPyTorchTrajectory) {
  Golden g = load_golden(GetParam());
  GoldenRun run = run_golden(g, cpu());  // tests/cuda/golden_cuda_test.cpp: the same on cuda:0
  expect_golden(run, g);
}

INSTANTIATE_TEST_SUITE_P(AllGoldenFiles, GoldenTest, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::testing
