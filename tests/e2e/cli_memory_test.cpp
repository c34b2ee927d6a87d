// End-to-end tests of models that do not fit in memory (issue 23): `--model mlp:10,100000000,2`
// passed a check that counted two copies of its weights, then drove the host out of memory
// (status 137, no message); `mlp:10,2000000,2` (104 MB of weights) peaked at 4 GB because
// validation ran the whole validation set in one forward. The limit here is `ulimit -v` (a
// cgroup's memory.max is read the same way, MemAvailable too); the sanitizers reserve terabytes
// of address space for their shadow memory, so these tests are skipped under them.
#include "cli_support.h"
#include "lockstep/data/idx.h"

namespace lockstep::e2e {
namespace {

// Refused before anything is allocated, exit 2 with the estimate, its parts and the limit
// (before: "out of memory" half way through setting up, or the OOM killer).
TEST(CliMemory, AModelThatDoesNotFitIsRefusedWithTheEstimate) {
  if (kSanitized) GTEST_SKIP() << "ulimit -v breaks the sanitizers' shadow memory";
  TempDir dir;
  const RunResult r = lockstep_limited(
      1 << 20, {"train", "--model", "mlp:10,4000000,2", "--epochs", "1", "--save", dir / "w"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const std::string m :
       {"--model mlp:10,4000000,2", "training needs about", "available (ulimit -v)",
        "52000002 parameters", "the activations of a batch of 32", "--batch-size"})
    EXPECT_NE(lines[0].find(m), std::string::npos) << m << " missing in " << lines[0];
  EXPECT_FALSE(fs::exists(dir / "w"));
}

// 400 validation rows through a 2,000,000-wide hidden layer: 6.4 GB of activations in one
// forward, under 256 MiB a chunk. Training (8 rows), validation and eval fit in 2 GiB.
TEST(CliMemory, ValidationAndEvalRunInBoundedChunks) {
  if (kSanitized) GTEST_SKIP() << "ulimit -v breaks the sanitizers' shadow memory";
  TempDir dir;
  std::string train = "a,b,label\n", val = "a,b,label\n";
  for (int i = 0; i < 8; ++i)
    train += std::to_string(i % 3) + ",0.5," + std::to_string(i % 2) + "\n";
  for (int i = 0; i < 400; ++i)
    val += std::to_string(i % 5) + ",0.25," + std::to_string(i % 2) + "\n";
  write_text(dir / "train.csv", train);
  write_text(dir / "val.csv", val);
  const std::string data = "csv:" + (dir / "train.csv") + "," + (dir / "val.csv");
  RunResult r = lockstep_limited(2 << 20, {"train", "--data", data, "--model", "mlp:2,2000000,2",
                                           "--epochs", "1", "--save", dir / "w"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("val_loss"), std::string::npos) << r.out;
  r = lockstep_limited(
      2 << 20, {"eval", "--data", data, "--model", "mlp:2,2000000,2", "--weights", dir / "w"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("samples 400"), std::string::npos) << r.out;
}

// A gpt: model is checked before it is built: 2 blocks 4,096 wide are 403 M parameters (1.6 GB of
// weights, 6.4 GB with AdamW's state and the gradients), refused under 1 GiB with the estimate.
TEST(CliMemory, AGptThatDoesNotFitIsRefusedBeforeItIsBuilt) {
  if (kSanitized) GTEST_SKIP() << "ulimit -v breaks the sanitizers' shadow memory";
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog\n";
  write_text(dir / "t.txt", text);
  const RunResult r =
      lockstep_limited(1 << 20, {"train", "--data", "text:" + (dir / "t.txt"), "--model",
                                 "gpt:layers=2,heads=2,embd=4096,block=16", "--max-iters", "1",
                                 "--batch-size", "2", "--save", dir / "w"});
  EXPECT_EQ(r.status, 2) << r.err;
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const std::string m : {"--model gpt:layers=2,heads=2,embd=4096,block=16",
                              "training needs about", "available (ulimit -v)", "--batch-size"})
    EXPECT_NE(lines[0].find(m), std::string::npos) << m << " missing in " << lines[0];
  EXPECT_FALSE(fs::exists(dir / "w"));
}

// resnet20 is not a layer list: its activations were not counted (parameters only), so a batch of
// 4,096 Fashion-MNIST images (about 17 GB of activations and gradients) passed the check under
// 2 GiB and ran out of memory in its first forward. Now counted from one 2-sample forward.
TEST(CliMemory, AResnetBatchThatDoesNotFitIsRefusedWithItsActivations) {
  if (kSanitized) GTEST_SKIP() << "ulimit -v breaks the sanitizers' shadow memory";
  if (!fs::exists(fs::path(data::kFashionMnistDir) / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << data::kFashionMnistDir << " not installed (Debian's dataset-fashion-mnist)";
  TempDir dir;
  const RunResult r =
      lockstep_limited(2 << 20, {"train", "--data", "fashion-mnist", "--model", "resnet20",
                                 "--batch-size", "4096", "--epochs", "1", "--save", dir / "w"});
  EXPECT_EQ(r.status, 2) << r.err;
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const std::string m : {"--model resnet20: training needs about", "available (ulimit -v)",
                              "the activations of a batch of 4096"})
    EXPECT_NE(lines[0].find(m), std::string::npos) << m << " missing in " << lines[0];
  EXPECT_FALSE(fs::exists(dir / "w"));
}

}  // namespace
}  // namespace lockstep::e2e
