// `lockstep` in a build without CUDA: every way of asking for a GPU or NCCL is a usage error.
#include "cli_support.h"

namespace lockstep::e2e {
namespace {

bool cuda_built() {
  RunResult r = lockstep({"--version"});
  return r.out.find("backends not built: NCCL/CUDA") == std::string::npos;
}

// Every way of asking for a GPU or NCCL is a usage error (exit 2, one line, nothing on stdout)
// naming the device or the backend, before any data is read or anything is written.
TEST(CliWithoutCuda, GpuDevicesAndNcclAreUsageErrorsWithoutCuda) {
  if (cuda_built()) GTEST_SKIP() << "a CUDA build: these probe the build without it";
  TempDir dir;
  for (const char* devices :
       {"cuda:0", "cpu:0,cuda:0", "cuda:1,cpu:0", "cuda", "cpu:1,cpu:0,cuda:3"})
    expect_usage_error({"train", "--devices", devices, "--save", dir / "w"}, {"--devices", "cuda"});
  expect_usage_error({"train", "--backend", "nccl", "--save", dir / "w"}, {"--backend", "nccl"});
  expect_usage_error({"train", "--backend", "nccl", "--devices", "cuda:0", "--save", dir / "w"},
                     {"cuda"});
  expect_usage_error({"eval", "--weights", dir / "missing", "--backend", "nccl"}, {"nccl"});
  EXPECT_TRUE(dir.entries().empty());
}

}  // namespace
}  // namespace lockstep::e2e
