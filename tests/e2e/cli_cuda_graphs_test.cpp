// `lockstep train --cuda-graphs` without a GPU (this machine, and builds without CUDA): refused
// with exit 2 and a message naming what the run trains on and why; flags a captured step does
// not cover are refused before anything runs. (Training with graphs on a GPU:
// tests/cuda/cuda_graph_test.cpp.)
#include "cli_support.h"
#include "lockstep/cuda/runtime.h"

namespace lockstep::e2e {
namespace {

TEST(CliCudaGraphs, RefusedOnCpuDevices) {
  expect_error({"train", "--epochs", "1", "--devices", "cpu:0", "--cuda-graphs", "--quiet"},
               {"--cuda-graphs", "exactly one GPU", "cpu:0"});
  expect_error({"train", "--epochs", "1", "--devices", "cpu:0,cpu:1", "--cuda-graphs", "--quiet"},
               {"--cuda-graphs", "cpu:0,cpu:1"});
}

TEST(CliCudaGraphs, WithoutAGpuTheReasonIsNamed) {
  if (cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  // Default devices without a GPU are CPU devices: the refusal says why there is no GPU.
  expect_error({"train", "--epochs", "1", "--cuda-graphs", "--quiet"},
               {"--cuda-graphs", "exactly one GPU", "no usable GPU", cuda::unavailable_reason()});
}

TEST(CliCudaGraphs, FlagsACapturedStepDoesNotCoverAreRefused) {
  const std::vector<std::string> base{"train", "--epochs", "1", "--cuda-graphs", "--quiet"};
  expect_error(base + std::vector<std::string>{"--clip-grad-norm", "1"},
               {"--cuda-graphs", "--clip-grad-norm"});
  expect_error(base + std::vector<std::string>{"--accumulate-steps", "2"},
               {"--cuda-graphs", "--accumulate-steps"});
  expect_error(base + std::vector<std::string>{"--precision", "bf16"},
               {"--cuda-graphs", "--precision bf16"});
  expect_error(base + std::vector<std::string>{"--deterministic"},
               {"--cuda-graphs", "--deterministic"});
  expect_error(base + std::vector<std::string>{"--dropout", "0.5"}, {"--cuda-graphs", "--dropout"});
}

TEST(CliCudaGraphs, HelpDescribesTheFlag) {
  RunResult r = lockstep({"train", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--cuda-graphs"), std::string::npos);
  EXPECT_NE(r.out.find("last partial batch runs eagerly"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lockstep::e2e
