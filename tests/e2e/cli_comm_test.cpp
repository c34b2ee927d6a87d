// `lockstep train --comm-overlap on|off --bucket-cap-mb MB --grad-compression none|bf16` end to
// end: overlap on and off save the same weights (several buckets, two devices); bf16 compression
// trains to other weights that stay close; the compression is refused with --deterministic and
// --cuda-graphs; bad values are usage errors (exit 2); a checkpoint does not hold the three, so a
// run resumes with other values; with --bucket-cap-mb the header says how many gradient buckets
// the reducer made.
#include <nlohmann/json.hpp>

#include "cli_support.h"

namespace lockstep::e2e {
namespace {

// The synthetic job on two devices, 62-byte buckets (3 for the default MLP's 4 tensors), with
// `flags` appended; the saved weights' bytes.
std::string trained_weights(const TempDir& dir, const std::vector<std::string>& flags,
                            const std::string& name) {
  const std::string out = dir / (name + ".safetensors");
  RunResult r = lockstep(std::vector<std::string>{"train", "--epochs", "2", "--devices",
                                                  "cpu:0,cpu:1", "--save", out, "--quiet"} +
                         flags);
  EXPECT_EQ(r.status, 0) << r.err;
  return read_text(out);
}

double final_val_loss(const std::string& metrics) {
  return nlohmann::json::parse(lines_of(read_text(metrics)).back()).at("val_loss").get<double>();
}

TEST(CliComm, OverlapOnAndOffSaveTheSameWeightsAndBf16OtherCloseOnes) {
  TempDir dir;
  const std::vector<std::string> small{"--bucket-cap-mb", "0.00006"};
  const std::string on =
      trained_weights(dir, small + std::vector<std::string>{"--comm-overlap", "on"}, "on");
  const std::string off =
      trained_weights(dir, small + std::vector<std::string>{"--comm-overlap", "off"}, "off");
  ASSERT_FALSE(on.empty());
  EXPECT_EQ(on, off) << "--comm-overlap changed the weights";
  const std::string bf16 = trained_weights(
      dir, small + std::vector<std::string>{"--grad-compression", "bf16", "--comm-overlap", "off"},
      "bf16");
  const std::string bf16_on = trained_weights(
      dir, small + std::vector<std::string>{"--grad-compression", "bf16"}, "bf16on");
  EXPECT_NE(bf16, on) << "--grad-compression bf16 changed nothing";
  EXPECT_EQ(bf16, bf16_on) << "--comm-overlap changed the compressed run's weights";
  // Close: the validation losses of the two runs agree to 1 %.
  std::vector<double> loss;
  for (const std::string c : {"none", "bf16"}) {
    const std::string metrics = dir / (c + ".jsonl");
    RunResult r = lockstep({"train", "--epochs", "2", "--devices", "cpu:0,cpu:1",
                            "--grad-compression", c, "--metrics", metrics, "--quiet"});
    ASSERT_EQ(r.status, 0) << r.err;
    loss.push_back(final_val_loss(metrics));
  }
  EXPECT_NEAR(loss[1], loss[0], 0.01 * loss[0]);
}

TEST(CliComm, BadValuesAreUsageErrors) {
  expect_usage_error({"train", "--comm-overlap", "yes"}, {"--comm-overlap", "on or off", "'yes'"});
  expect_usage_error({"train", "--comm-overlap"}, {"--comm-overlap"});
  for (const std::string mb : {"0", "-1", "nan", "inf", "1e9", "abc", ""})
    expect_usage_error({"train", "--bucket-cap-mb", mb},
                       {"--bucket-cap-mb", "megabytes > 0", "'" + mb + "'"});
  expect_usage_error({"train", "--grad-compression", "fp16"},
                     {"--grad-compression", "none or bf16", "'fp16'"});
  expect_usage_error({"train", "--grad-compression", "BF16"}, {"--grad-compression", "'BF16'"});
}

TEST(CliComm, CompressionIsRefusedWithDeterministicAndCudaGraphs) {
  expect_error({"train", "--epochs", "1", "--grad-compression", "bf16", "--deterministic"},
               {"--grad-compression bf16", "--deterministic"});
  expect_error({"train", "--epochs", "1", "--grad-compression", "bf16", "--cuda-graphs"},
               {"--cuda-graphs", "--grad-compression bf16"});
  // none is the default and goes with both.
  RunResult r = lockstep(
      {"train", "--epochs", "1", "--grad-compression", "none", "--deterministic", "--quiet"});
  EXPECT_EQ(r.status, 0) << r.err;
}

// With --bucket-cap-mb, the header line with the reducer's bucket count. The default synthetic
// MLP (mlp:10,5,2) holds,
// in reverse parameter order, fc2.bias 2, fc2.weight 10, fc1.bias 5 and fc1.weight 50 float32
// elements; a new bucket starts where the next one would take the open bucket past
// int(MB * 2^20) bytes: 25 MB one bucket; 104 bytes 68 + 200 (2); 62 bytes 48 + 20 + 200 (3);
// 1 byte one per tensor (4).
TEST(CliComm, TheHeaderCountsTheGradientBuckets) {
  const struct {
    std::vector<std::string> flags;
    std::string line;
  } cases[] = {
      {{"--bucket-cap-mb", "25"}, "gradient buckets: 1 (--bucket-cap-mb 25)"},
      {{"--bucket-cap-mb", "0.0001"}, "gradient buckets: 2 (--bucket-cap-mb 1e-04)"},
      {{"--bucket-cap-mb", "0.00006"}, "gradient buckets: 3 (--bucket-cap-mb 6e-05)"},
      {{"--bucket-cap-mb", "0.000001"}, "gradient buckets: 4 (--bucket-cap-mb 1e-06)"},
  };
  for (const auto& c : cases) {
    RunResult r = lockstep(
        std::vector<std::string>{"train", "--epochs", "1", "--devices", "cpu:0,cpu:1"} + c.flags);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(lines_of(r.out).front(), c.line) << r.out;
  }
  // Nothing is bucketed on one device or in deterministic mode (its shards are summed whole);
  // without the flag the output stays the reference program's lines.
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--devices", "cpu:0", "--bucket-cap-mb", "1"},
        std::vector<std::string>{"--devices", "cpu:0,cpu:1", "--deterministic", "--bucket-cap-mb",
                                 "1"},
        std::vector<std::string>{"--devices", "cpu:0,cpu:1"}}) {
    RunResult r = lockstep(std::vector<std::string>{"train", "--epochs", "1"} + flags);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("gradient buckets"), std::string::npos) << r.out;
  }
}

TEST(CliComm, AResumedRunMayUseOtherValues) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  RunResult first = lockstep(
      {"train", "--epochs", "1", "--devices", "cpu:0,cpu:1", "--checkpoint-dir", ckpt, "--quiet"});
  ASSERT_EQ(first.status, 0) << first.err;
  RunResult resumed = lockstep({"train", "--epochs", "2", "--devices", "cpu:0,cpu:1",
                                "--checkpoint-dir", ckpt, "--resume", "--grad-compression", "bf16",
                                "--comm-overlap", "off", "--bucket-cap-mb", "1", "--quiet"});
  EXPECT_EQ(resumed.status, 0) << resumed.err;
}

TEST(CliComm, HelpDescribesTheFlags) {
  RunResult r = lockstep({"train", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const std::string flag : {"--comm-overlap", "--bucket-cap-mb", "--grad-compression",
                                 "bf16_compress_hook", "bucket_cap_mb"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace lockstep::e2e
