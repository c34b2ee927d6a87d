// Breaker probes of `lockstep train --precision bf16` combined with the other training flags:
// --deterministic stays bit-identical across device counts under bf16 with gradient
// accumulation, --clip-grad-norm, AdamW, dropout, a batch smaller than the device count and a
// last partial batch; a bf16 run split by --resume equals the uninterrupted one; an explicit
// `--precision fp32` cannot resume a bf16 checkpoint.
#include "cli_support.h"

namespace lockstep::e2e {
namespace {

const std::vector<std::string> kOddBf16 = {"train",
                                           "--precision",
                                           "bf16",
                                           "--deterministic",
                                           "--epochs",
                                           "2",
                                           "--batch-size",
                                           "3",
                                           "--accumulate-steps",
                                           "2",
                                           "--clip-grad-norm",
                                           "0.25",
                                           "--optimizer",
                                           "adamw",
                                           "--dropout",
                                           "0.3",
                                           "--model",
                                           "mlp:10,12,6,2",
                                           "--activation",
                                           "gelu",
                                           "--quiet"};

TEST(CliPrecisionBreak, DeterministicBf16BitIdenticalAcrossDeviceCountsWithOddFlags) {
  TempDir dir;
  std::string first;
  // 800 training rows in batches of 3: the last batch has 2 rows, fewer than 3 or 5 devices.
  for (const std::string devices :
       {"cpu:0", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:1,cpu:2,cpu:3,cpu:4"}) {
    SCOPED_TRACE(devices);
    const std::string save = dir / ("w" + std::to_string(devices.size()) + ".safetensors");
    RunResult r =
        lockstep(kOddBf16 + std::vector<std::string>{"--devices", devices, "--save", save});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string bytes = read_text(save);
    if (first.empty())
      first = bytes;
    else
      EXPECT_TRUE(bytes == first) << "weights differ from one device's";
  }
  // ... and bf16 did something: the fp32 run of the same flags writes other weights.
  std::vector<std::string> fp32 = kOddBf16;
  fp32[2] = "fp32";
  RunResult r = lockstep(
      fp32 + std::vector<std::string>{"--devices", "cpu:0", "--save", dir / "fp32.safetensors"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(read_text(dir / "fp32.safetensors") == first);
}

TEST(CliPrecisionBreak, Bf16ResumedRunEqualsUninterruptedRun) {
  TempDir dir;
  const std::vector<std::string> flags = {"train", "--precision", "bf16",        "--batch-size",
                                          "7",     "--optimizer", "adam",        "--dropout",
                                          "0.2",   "--devices",   "cpu:0,cpu:1", "--quiet"};
  RunResult full = lockstep(
      flags + std::vector<std::string>{"--epochs", "3", "--save", dir / "full.safetensors"});
  ASSERT_EQ(full.status, 0) << full.err;
  const std::string ckpt = dir / "ckpt";
  RunResult part =
      lockstep(flags + std::vector<std::string>{"--epochs", "1", "--checkpoint-dir", ckpt});
  ASSERT_EQ(part.status, 0) << part.err;
  RunResult rest =
      lockstep(flags + std::vector<std::string>{"--epochs", "3", "--checkpoint-dir", ckpt,
                                                "--resume", "--save", dir / "resumed.safetensors"});
  ASSERT_EQ(rest.status, 0) << rest.err;
  EXPECT_TRUE(read_text(dir / "resumed.safetensors") == read_text(dir / "full.safetensors"));
  // An explicit --precision fp32 is refused as the default is.
  expect_error(
      {"train", "--precision", "fp32", "--batch-size", "7", "--optimizer", "adam", "--dropout",
       "0.2", "--epochs", "3", "--checkpoint-dir", ckpt, "--resume"},
      {"--resume", "--precision=fp32 (the default) but the checkpoint has --precision=bf16"});
}

}  // namespace
}  // namespace lockstep::e2e
