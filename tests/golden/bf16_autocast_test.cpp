// Short golden trajectories under bf16 autocast (include/lockstep/ops/autocast.h) against
// PyTorch 1.13 on CPU: tests/data/bf16/autocast.json, made by tests/data/bf16/make_autocast.py
// from the golden files' data and initial parameters (first 50 steps of the reference program
// seed_mlp_sgd, all 15 of mlp_momentum_uneven). run_golden with autocast runs each step's
// forward and loss under an AutocastGuard.
//
// Tolerances (measured, see the comments at each check):
//   * against the "emulated" run (Lockstep's contract written in fp32 PyTorch ops): only the
//     order of fp32 summation inside the GEMMs differs, which could move a result across a bf16
//     rounding boundary (one bf16 step, 2^-8 relative, in one element). Measured here: losses
//     within 1.2e-7 (fp32 noise of the loss). 1e-5 absolute leaves room for other BLAS orders
//     and stays 40x below the bf16-vs-fp32 gap.
//   * against torch.autocast itself: PyTorch 1.13's CPU bf16 backward GEMMs round every partial
//     sum to bf16 (autocast.h), so its gradients are a few bf16 steps off Lockstep's; the losses
//     differ by up to ~2e-4 over these runs. 1e-3 absolute (bf16 resolution of a loss near 1 is
//     2^-8 ≈ 4e-3; the loss itself is computed in fp32 from bf16 logits).
//   * "must be able to fail": the fp32 trajectory differs from the bf16 one by more than the
//     emulation tolerance (max ~5e-4), checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

constexpr double kEmulatedAtol = 1e-5;
constexpr double kAutocastAtol = 1e-3;

nlohmann::json bf16_file() {
  std::ifstream in(test_data_path("bf16/autocast.json"));
  if (!in) throw Error("cannot open " + test_data_path("bf16/autocast.json"));
  return nlohmann::json::parse(in);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

class Bf16GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16GoldenTest, MatchesPyTorchAutocastTrajectory) {
  const auto file = bf16_file();
  const auto& expected = file.at("runs").at(GetParam());
  const auto steps = expected.at("steps").get<std::int64_t>();
  const auto emulated = expected.at("emulated_step_losses").get<std::vector<double>>();
  const auto autocast = expected.at("autocast_step_losses").get<std::vector<double>>();
  const Golden g = load_golden(GetParam());
  const GoldenRun run = run_golden(g, cpu(), /*autocast=*/true, steps);
  ASSERT_EQ(std::ssize(run.step_losses), steps);
  EXPECT_TRUE(AllClose(run.step_losses, emulated, 0, kEmulatedAtol)) << "emulated_step_losses";
  EXPECT_TRUE(AllClose(run.step_losses, autocast, 0, kAutocastAtol)) << "autocast_step_losses";
  for (auto& [name, v] : expected.at("emulated_final_parameters").items()) {
    const auto data = v.at("data").get<std::vector<double>>();
    // Parameters: SGD steps of lr·(bf16 gradient); a flipped rounding would move one gradient
    // element by 2^-8 of itself, i.e. the parameter by lr·2^-8·|g| (< 1e-5 here).
    EXPECT_TRUE(AllClose(run.final_params.at(name).to_vector<double>(), data, 1e-5, 1e-5)) << name;
  }
  const GoldenRun fp32 = run_golden(g, cpu(), /*autocast=*/false, steps);
  EXPECT_GT(max_abs_diff(fp32.step_losses, run.step_losses), 4 * kEmulatedAtol)
      << "the bf16 trajectory is indistinguishable from fp32";
  std::printf("[ bf16     ] %s: max |loss - emulated| %.3g, - autocast %.3g, - fp32 %.3g\n",
              GetParam().c_str(), max_abs_diff(run.step_losses, emulated),
              max_abs_diff(run.step_losses, autocast),
              max_abs_diff(run.step_losses, fp32.step_losses));
}

INSTANTIATE_TEST_SUITE_P(Runs, Bf16GoldenTest,
                         ::testing::Values("seed_mlp_sgd", "mlp_momentum_uneven"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::testing
