// End-to-end tests of odd input found by trying to break `lockstep train` / `eval` as a new user
// would: absurd model widths (they crashed), empty file-name values (silently ignored), a
// --checkpoint-dir that is a file (refused only after an epoch), NaN initial weights (trained
// "fine": relu swallowed NaN).
#include <sys/stat.h>

#include <cmath>
#include <limits>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"
#include "lockstep/lockstep.h"

namespace lockstep::e2e {
namespace {

// ---- model sizes ----------------------------------------------------------------------------

// Widths whose parameter count overflows int64 crashed (SIGSEGV); widths whose parameters need
// terabytes ended in "out of memory" (exit 1). Both are bad values: exit 2 naming --model.
TEST(CliBreak, AbsurdModelWidthsAreUsageErrorsNotCrashes) {
  TempDir dir;
  for (const std::string width : {"4611686018427387904", "1000000000000"}) {
    const std::string model = "mlp:10," + width + ",2";
    const std::vector<std::string> outputs{"--save", dir / "w", "--metrics", dir / "m"};
    expect_usage_error(std::vector<std::string>{"train", "--model", model} + outputs,
                       {"--model", model, "parameters", "memory"});
    expect_usage_error({"eval", "--model", model, "--weights", dir / "w"},
                       {"--model", model, "parameters", "memory"});
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

// A huge label makes the default model's output width (max label + 1) absurd: the error names
// the data file and the class count instead of crashing.
TEST(CliBreak, HugeLabelGivesAnAbsurdDefaultModelThatIsRefused) {
  TempDir dir;
  for (const std::string label : {"9007199254740992", "1000000000"}) {
    write_text(dir / "d.csv", "a,b,label\n1,2,0\n3,4," + label + "\n");
    expect_usage_error({"train", "--data", "csv:" + (dir / "d.csv"), "--val-fraction", "0"},
                       {"--model", dir / "d.csv", "classes", "memory"});
  }
}

// ---- empty values ---------------------------------------------------------------------------

// `--save "$OUT"` with OUT unset must not silently train without saving (or, for --init, from
// random parameters).
TEST(CliBreak, EmptyFileNamesAreRefused) {
  for (const std::string flag : {"--save", "--metrics", "--checkpoint-dir", "--init"})
    expect_usage_error({"train", "--epochs", "1", flag, ""}, {flag, "''"});
  expect_usage_error({"eval", "--weights", ""}, {"--weights", "''"});
}

// ---- checkpoint directory -------------------------------------------------------------------

TEST(CliBreak, CheckpointDirThatIsAFileIsRefusedBeforeTraining) {
  TempDir dir;
  write_text(dir / "file", "x");
  expect_usage_error({"train", "--checkpoint-dir", dir / "file", "--metrics", dir / "m"},
                     {"--checkpoint-dir", dir / "file", "not a directory"});
  EXPECT_FALSE(fs::exists(dir / "m"));
  // A missing directory is fine: it is created.
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--checkpoint-dir", dir / "a/b"}).status, 0);
  EXPECT_TRUE(fs::exists(dir / "a/b/epoch-0001.safetensors"));
}

// ---- non-finite initial weights -------------------------------------------------------------

// NaN weights give a NaN loss in PyTorch (relu(nan) is nan); Lockstep's relu turned NaN into 0,
// so training "succeeded" with exit 0 and eval printed a finite loss. Since then weights files
// holding NaN/Inf are refused when loaded (exit 2, naming the tensor; CliFiles.NonFiniteWeights*),
// before any step: nothing is written.
TEST(CliBreak, NanInitialWeightsAreRefusedBeforeTraining) {
  TempDir dir;
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--save", dir / "w"}).status, 0);
  safetensors::File f = safetensors::load_file(dir / "w");
  StateDict state;
  for (auto& [name, t] : f.tensors) {
    if (name == "0.weight") t.fill_(std::numeric_limits<double>::quiet_NaN());
    state.insert(name, t);
  }
  safetensors::save_state_dict(state, dir / "nan");
  RunResult r = lockstep({"train", "--init", dir / "nan", "--save", dir / "out"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("tensor '0.weight' [5, 10] holds NaN at flat index 0"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  r = lockstep({"eval", "--weights", dir / "nan"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
}

// A signal before training: see CliSignalsEarly (cli_signals_test.cpp).

}  // namespace
}  // namespace lockstep::e2e
