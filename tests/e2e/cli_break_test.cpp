// End-to-end tests of odd input found by trying to break `lockstep train` / `eval` as a new user
// would: absurd model widths (they crashed), empty file-name values (silently ignored), a
// --checkpoint-dir that is a file (refused only after an epoch), NaN initial weights (trained
// "fine": relu swallowed NaN) and a signal before training (misleading message).
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

// ---- signals --------------------------------------------------------------------------------

// A signal while the data is still loading stops before epoch 1. The message said "no
// --checkpoint-dir" although one was given.
TEST(CliBreak, SignalBeforeTrainingDoesNotDenyTheCheckpointDir) {
  TempDir dir;
  const std::string fifo = dir / "fifo.csv";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Child child(kCli, {"train", "--data", "csv:" + fifo, "--checkpoint-dir", dir / "ck"});
  // Opening the FIFO for writing returns once lockstep opened it for reading, i.e. inside
  // load_data, after the signal handlers were installed.
  // O_NONBLOCK fails (ENXIO) until there is a reader, so a child that never opens it cannot
  // hang the test.
  int fd = -1;
  for (int i = 0; i < 2000 && fd < 0; ++i) {
    fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(fd, 0) << "lockstep did not open " << fifo;
  ASSERT_EQ(::fcntl(fd, F_SETFL, 0), 0);
  ASSERT_EQ(::kill(child.pid(), SIGINT), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string rows = "1,2,0\n3,4,1\n5,6,1\n";
  ASSERT_EQ(::write(fd, rows.data(), rows.size()), static_cast<ssize_t>(rows.size()));
  ::close(fd);
  RunResult r = child.wait();
  EXPECT_EQ(r.status, 130) << r.err;
  auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("interrupted by SIGINT before epoch 1"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("no --checkpoint-dir"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace lockstep::e2e
