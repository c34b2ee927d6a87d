// End-to-end probes (breaker) of the fused optimizer in `lockstep train` (one process without
// --clip-grad-norm registers it with DataParallel::register_fused_optim). The reference is the same
// run with --clip-grad-norm 1e30: that keeps the unfused forward_backward + optimizer.step() path
// and the clip never scales (its coefficient is clamped to 1), so the saved weights must be
// bit-identical.
#include "cli_support.h"

namespace lockstep::e2e {
namespace {

// Trains with `flags`, fused and unfused; expects byte-identical --save files.
void expect_same_as_unfused(const std::vector<std::string>& flags) {
  TempDir dir;
  const std::vector<std::string> base = {"train", "--epochs", "2", "--batch-size", "23", "--quiet"};
  const auto fused = base + flags + std::vector<std::string>{"--save", dir / "fused"};
  const auto unfused =
      base + flags +
      std::vector<std::string>{"--clip-grad-norm", "1e30", "--save", dir / "unfused"};
  SCOPED_TRACE(command_text(fused));
  RunResult a = lockstep(fused);
  ASSERT_EQ(a.status, 0) << a.err;
  RunResult b = lockstep(unfused);
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(read_text(dir / "fused"), read_text(dir / "unfused")) << "the fused run differs";
}

TEST(CliFusedBreak, FusedRunsEqualUnfusedOnes) {
  for (const auto& flags : std::vector<std::vector<std::string>>{
           {"--devices", "cpu:0,cpu:1", "--optimizer", "adam", "--weight-decay", "0.1"},
           {"--devices", "cpu:0,cpu:1,cpu:2", "--momentum", "0.9", "--nesterov",
            "--accumulate-steps", "3", "--lr-schedule", "step:1:0.5"},
           {"--devices", "cpu:0,cpu:1", "--deterministic", "--optimizer", "adamw"},
       })
    expect_same_as_unfused(flags);
}

// BUG (fails on main): with --deterministic, the batches inside a gradient-accumulation group
// (run under no_sync(), a no-op for the reduction in deterministic mode) each make a fused
// optimizer step, so --deterministic --accumulate-steps K trains differently from the same flags
// before the fused optimizer (and from the --clip-grad-norm path).
TEST(CliFusedBreak, DeterministicGradientAccumulationEqualsUnfused) {
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1"})
    expect_same_as_unfused(
        {"--devices", devices, "--deterministic", "--accumulate-steps", "3", "--momentum", "0.9"});
}

// ---- cuda:k and nccl in a build without CUDA ---------------------------------------------------

bool cuda_built() {
  RunResult r = lockstep({"--version"});
  return r.out.find("backends not built: NCCL/CUDA") == std::string::npos;
}

// Every way of asking for a GPU or NCCL is a usage error (exit 2, one line, nothing on stdout)
// naming the device or the backend, before any data is read or anything is written.
TEST(CliFusedBreak, GpuDevicesAndNcclAreUsageErrorsWithoutCuda) {
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
