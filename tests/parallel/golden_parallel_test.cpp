// Every golden trajectory reproduced by DataParallel on N = 1, 2, 3, 4, 5, 7, 8 CPU devices,
// through the gather path (forward + loss.backward) and the reducer path (forward_backward),
// within allclose; in deterministic mode the final parameters are bit-identical across all N.
#include <gtest/gtest.h>

#include "support/golden.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using Path = DataParallelPath;

GoldenRun train(const Golden& g, int devices, Path path, bool deterministic) {
  parallel::DataParallelOptions opts;
  opts.deterministic = deterministic;
  opts.threads_per_device = 1;
  return run_golden_data_parallel(g, cpus(devices), path, opts);
}

class GoldenParallel : public ::testing::TestWithParam<std::tuple<std::string, int, Path>> {};

TEST_P(GoldenParallel, MatchesPyTorch) {
  auto [name, n, path] = GetParam();
  Golden g = load_golden(name);
  GoldenRun run = train(g, n, path, false);
  expect_golden(run, g);
}

INSTANTIATE_TEST_SUITE_P(AllFiles, GoldenParallel,
                         ::testing::Combine(::testing::ValuesIn(golden_names()),
                                            ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                                            ::testing::Values(Path::Gather, Path::Reducer)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_N" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) == Path::Gather ? "_gather"
                                                                           : "_reducer");
                         });

class DeterministicParallel : public ::testing::TestWithParam<std::tuple<std::string, Path>> {};

TEST_P(DeterministicParallel, BitIdenticalAcrossDeviceCounts) {
  auto [name, path] = GetParam();
  Golden g = load_golden(name);
  GoldenRun one = train(g, 1, path, true);
  for (const auto& [key, expected] : g.final_params)
    EXPECT_TRUE(AllClose(one.final_params.at(key), expected)) << key << " vs PyTorch";
  for (int n : {2, 3, 4, 5, 7, 8}) {
    GoldenRun other = train(g, n, path, true);
    for (const auto& [key, t] : one.final_params)
      EXPECT_TRUE(BitEqual(other.final_params.at(key), t)) << key << " N=" << n;
    EXPECT_EQ(other.step_losses, one.step_losses) << "N=" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFiles, DeterministicParallel,
                         ::testing::Combine(::testing::ValuesIn(golden_names()),
                                            ::testing::Values(Path::Gather, Path::Reducer)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) == Path::Gather
                                                                 ? "_gather"
                                                                 : "_reducer");
                         });

}  // namespace
}  // namespace lockstep::testing
