// End-to-end tests of issue 39, "The CLI never loses work, part 2": every output compared with
// every input, the memory need of every command checked before it allocates, bounded reads, and
// the checks that can run before training. Tiny models and data, a few steps each.
#include <sys/stat.h>

#include <cstdint>
#include <memory>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::e2e {
namespace {

/// Expects exit 2, nothing on stdout and one error line holding every string of `mentions`.
void expect_refused(const RunResult& r, const std::vector<std::string>& mentions) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const std::string& m : mentions)
    EXPECT_NE(lines[0].find(m), std::string::npos) << m << " missing in " << lines[0];
}

/// `lockstep args` started with LOCKSTEP_TEST_FAULT=hang:0:STEP, once it has stopped itself before
/// that step (training has begun: a signal is recorded, acted on after the step).
std::unique_ptr<Child> stopped_before_step(int step, const std::vector<std::string>& args) {
  ::setenv("LOCKSTEP_TEST_FAULT", ("hang:0:" + std::to_string(step)).c_str(), 1);
  auto child = std::make_unique<Child>(kCli, args);
  ::unsetenv("LOCKSTEP_TEST_FAULT");
  int wstatus = 0;
  EXPECT_EQ(::waitpid(child->pid(), &wstatus, WUNTRACED), child->pid());
  EXPECT_TRUE(WIFSTOPPED(wstatus));
  return child;
}

/// A Fashion-MNIST layout of 4x4 images in `dir`: 16 training, 8 test rows, 10 classes.
void write_mnist_dir(const fs::path& dir) {
  fs::create_directories(dir);
  write_text(dir / "train-images-idx3-ubyte", idx_images(16, 4, 4));
  write_text(dir / "train-labels-idx1-ubyte", idx_labels(cyclic_labels(16, 10)));
  write_text(dir / "t10k-images-idx3-ubyte", idx_images(8, 4, 4));
  write_text(dir / "t10k-labels-idx1-ubyte", idx_labels(cyclic_labels(8, 10)));
}

// High 1: an output never replaces a file the run reads — a data file inside a fashion-mnist
// directory, the --model @FILE, the checkpoint --resume continues — also when named through a
// link or a `..` path; and no output lies in --checkpoint-dir under a checkpoint's name.
TEST(CliNeverLose, AnOutputNeverReplacesAnInput) {
  TempDir dir;
  const fs::path data = dir.path() / "fm";
  write_mnist_dir(data);
  fs::create_directories(dir.path() / "sub");
  fs::create_symlink(data / "t10k-images-idx3-ubyte", dir.path() / "link");
  const std::string labels = read_text(data / "train-labels-idx1-ubyte");
  const std::vector<std::string> train{"train", "--data", "fashion-mnist:" + data.string(),
                                       "--model", "mlp:16,8,10", "--epochs", "1"};
  expect_usage_error(train + std::vector<std::string>{"--save", (data / "train-labels-idx1-ubyte")},
                     {"--save", "--data", "same file"});
  expect_usage_error(train + std::vector<std::string>{"--metrics", dir / "sub/../fm/train-labels-idx1-ubyte"},
                     {"--metrics", "same file"});
  expect_usage_error(train + std::vector<std::string>{"--save", dir / "link"},
                     {"--save", "same file"});
  EXPECT_EQ(read_text(data / "train-labels-idx1-ubyte"), labels);

  write_text(dir / "model.txt", "Flatten Linear(16, 10)\n");
  expect_usage_error({"train", "--data", "fashion-mnist:" + data.string(), "--model",
                      "@" + (dir / "model.txt"), "--epochs", "1", "--metrics", dir / "model.txt"},
                     {"--metrics", "--model", "same file"});
  EXPECT_EQ(read_text(dir / "model.txt"), "Flatten Linear(16, 10)\n");

  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--checkpoint-dir", dir / "ck"}).status, 0);
  const std::string checkpoint = read_text(dir / "ck/epoch-0001.safetensors");
  // A hard link: the same file by device and inode under another name.
  fs::create_hard_link(dir / "ck/epoch-0001.safetensors", dir / "hard");
  expect_usage_error({"train", "--epochs", "2", "--checkpoint-dir", dir / "ck", "--resume",
                      "--metrics", dir / "hard"},
                     {"--metrics", "--resume", "same file"});
  expect_usage_error({"train", "--epochs", "2", "--checkpoint-dir", dir / "ck", "--resume",
                      "--save", dir / "ck/epoch-0003.safetensors"},
                     {"--save", "--checkpoint-dir", "checkpoint's name"});
  fs::create_directories(dir.path() / "ck2");
  expect_usage_error({"train", "--epochs", "2", "--checkpoint-dir", dir / "ck2", "--save",
                      dir / "ck2/epoch-0002.safetensors"},
                     {"--save", "checkpoint's name"});
  EXPECT_EQ(read_text(dir / "ck/epoch-0001.safetensors"), checkpoint);
}

// Low: a link to a target that does not exist yet, given as a second output, is the same file
// as the first output (both would create it).
TEST(CliNeverLose, ADanglingLinkToAnotherOutputIsTheSameFile) {
  TempDir dir;
  fs::create_symlink(dir / "w", dir / "dangling");
  expect_usage_error({"train", "--epochs", "1", "--save", dir / "w", "--metrics", dir / "dangling"},
                     {"--save", "--metrics", "same file"});
  EXPECT_FALSE(fs::exists(dir / "w"));
}

// High 2 and Medium 4: every command checks its whole need before it allocates, for every kind
// of model: `eval` of an mlp whose one copy passed the old check against the machine's RAM, a
// layer list (built before its check: `out of memory`, exit 1), and `generate` of a gpt: model
// named by a file's metadata (built straight from it).
TEST(CliNeverLose, EveryCommandChecksItsWholeMemoryNeedBeforeItAllocates) {
  if (kSanitized) GTEST_SKIP() << "ulimit -v breaks the sanitizers' shadow memory";
  TempDir dir;
  write_text(dir / "w", "not read: refused before");
  expect_refused(lockstep_limited(1 << 20, {"eval", "--model", "mlp:10,30000000,2", "--weights",
                                            dir / "w"}),
                 {"--model mlp:10,30000000,2", "evaluation needs about", "(ulimit -v)"});
  expect_refused(
      lockstep_limited(1 << 20, {"train", "--model", "Linear(10,30000000) ReLU Linear(30000000,2)",
                                 "--epochs", "1", "--save", dir / "s"}),
      {"--model", "training needs about", "(ulimit -v)", "--batch-size"});
  expect_refused(
      lockstep_limited(1 << 20, {"eval", "--model", "Linear(10,30000000) ReLU Linear(30000000,2)",
                                 "--weights", dir / "w"}),
      {"evaluation needs about", "(ulimit -v)"});
  // 2 blocks 4,096 wide: 403 M parameters (1.6 GB) named by the metadata alone.
  safetensors::save_state_dict({}, dir / "gpt.safetensors",
                               {{"tokenizer", "bytes"},
                                {"model", "gpt:layers=2,heads=2,embd=4096,block=16"},
                                {"vocab_size", "256"}});
  expect_refused(lockstep_limited(1 << 20, {"generate", "--weights", dir / "gpt.safetensors",
                                            "--max-new-tokens", "1"}),
                 {"gpt:layers=2,heads=2,embd=4096,block=16", "needs about", "(ulimit -v)"});
  EXPECT_FALSE(fs::exists(dir / "s"));
}

/// The directory of this process's cgroup-v1 memory controller, from /proc/self/cgroup; empty
/// when there is none.
fs::path own_memory_cgroup_v1() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find(",memory,") != std::string::npos)
      return fs::path("/sys/fs/cgroup/memory") / line.substr(b + 2);
  }
  return {};
}

// Medium 3, cgroup v1 with a real group: the process's own group's memory.limit_in_bytes (the
// root group's was read, so a limited group killed the run with status 137 and no message).
TEST(CliNeverLose, TheMemoryLimitOfTheProcesssCgroupV1IsHonoured) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers' memory use";
  const fs::path parent = own_memory_cgroup_v1();
  if (parent.empty() || !fs::exists(parent / "memory.limit_in_bytes"))
    GTEST_SKIP() << "no cgroup-v1 memory controller";
  const fs::path group = parent / ("lockstep-test-" + std::to_string(::getpid()));
  std::error_code ec;
  if (!fs::create_directory(group, ec) || ec) GTEST_SKIP() << "cannot create " << group;
  struct Remove {
    fs::path p;
    ~Remove() { ::rmdir(p.c_str()); }
  } remove{group};
  write_text(group / "memory.limit_in_bytes", "419430400");  // 400 MiB, a multiple of the page
  if (read_text(group / "memory.limit_in_bytes") != "419430400\n")
    GTEST_SKIP() << "cannot set " << group / "memory.limit_in_bytes";
  TempDir dir;
  const RunResult r = run("/bin/sh", {"-c", "echo $$ > \"$0\" && exec \"$@\"",
                                      (group / "cgroup.procs").string(), kCli, "train", "--model",
                                      "mlp:10,4000000,2", "--epochs", "1", "--save", dir / "w"});
  expect_refused(r, {"training needs about", "memory.limit_in_bytes"});
  EXPECT_FALSE(fs::exists(dir / "w"));
}

// Medium 3, cgroup v2 against a fixture tree (LOCKSTEP_TEST_CGROUP_ROOT: `cgroup`, read instead
// of /proc/self/cgroup, and `fs`, the cgroup mount): the limit is the process's own group's,
// the tightest of it and its ancestors, less their usage (before: /sys/fs/cgroup/memory.max, a
// file only a cgroup namespace's root has).
TEST(CliNeverLose, TheMemoryLimitOfTheProcesssCgroupV2IsHonoured) {
  TempDir dir;
  fs::create_directories(dir.path() / "fs/jobs/run1");
  write_text(dir / "cgroup", "0::/jobs/run1\n");
  write_text(dir / "fs/memory.current", "0\n");  // the root group: no limit of its own
  write_text(dir / "fs/jobs/memory.max", "2000000000\n");
  write_text(dir / "fs/jobs/memory.current", "0\n");
  write_text(dir / "fs/jobs/run1/memory.max", "1100000000\n");
  write_text(dir / "fs/jobs/run1/memory.current", "100000000\n");
  ::setenv("LOCKSTEP_TEST_CGROUP_ROOT", dir.path().c_str(), 1);
  const RunResult big = lockstep({"train", "--model", "mlp:10,4000000,2", "--epochs", "1"});
  const RunResult small = lockstep({"train", "--epochs", "1"});
  ::unsetenv("LOCKSTEP_TEST_CGROUP_ROOT");
  expect_refused(big, {"training needs about", "953.7 MiB available (the cgroup's memory.max)"});
  EXPECT_EQ(small.status, 0) << small.err;
}

// Medium 5: every read is bounded. A device is no input (it has no size: /dev/zero was read
// until memory ran out, and `--model @/dev/zero` aborted with an uncaught std::bad_alloc and a
// core dump); a file larger than the memory the run may use is refused before it is read.
TEST(CliNeverLose, EveryReadIsBounded) {
  if (kSanitized) GTEST_SKIP() << "ulimit -v breaks the sanitizers' shadow memory";
  TempDir dir;
  const long limit = 1 << 20;  // KiB: 1 GiB of address space
  expect_refused(lockstep_limited(limit, {"train", "--model", "@/dev/zero", "--epochs", "1"}),
                 {"--model", "@/dev/zero", "character device"});
  expect_refused(lockstep_limited(limit, {"train", "--init", "/dev/zero", "--epochs", "1"}),
                 {"--init", "/dev/zero", "character device"});
  expect_refused(lockstep_limited(limit, {"eval", "--weights", "/dev/zero"}),
                 {"--weights", "/dev/zero", "character device"});
  expect_refused(lockstep_limited(limit, {"train", "--data", "csv:/dev/zero", "--epochs", "1"}),
                 {"/dev/zero", "character device"});
  expect_refused(lockstep_limited(limit, {"train", "--data", "text:/dev/zero", "--model",
                                          "gpt:layers=1,heads=1,embd=8,block=4"}),
                 {"/dev/zero", "character device"});
  // A sparse file of 64 GiB: more than the memory there is to read it into.
  {
    std::ofstream f(dir / "huge.csv");
  }
  fs::resize_file(dir / "huge.csv", std::uintmax_t{64} << 30);
  expect_refused(
      lockstep_limited(limit, {"train", "--data", "csv:" + (dir / "huge.csv"), "--epochs", "1"}),
      {"huge.csv", "64.0 GiB", "more than"});
  // A model file from a pipe (bash's process substitution is /dev/fd/N) is read once.
  const RunResult r = run("/bin/bash", {"-c", "exec \"$0\" train --epochs 1 --model "
                                              "@<(echo 'Linear(10, 2)')",
                                        kCli});
  EXPECT_EQ(r.status, 0) << r.err;
}

// Medium 7: a signal is honoured in every phase. SIGTERM arriving during the last step (the
// process stops itself there, LOCKSTEP_TEST_FAULT) is seen after it, in the final evaluation's
// phase: the run used to drop it and exit 0; now the finished model is still saved (--save, the
// last checkpoint) and the run exits 143 saying so.
TEST(CliNeverLose, ASignalInTheLastPhaseIsHonoured) {
  TempDir dir;
  const auto child =  // 800 rows / 32: step 25 is the last
      stopped_before_step(25, {"train", "--epochs", "1", "--devices", "cpu:0", "--save",
                               dir / "w", "--checkpoint-dir", dir / "ck"});
  if (::testing::Test::HasFailure()) return;
  ::kill(child->pid(), SIGTERM);
  ::kill(child->pid(), SIGCONT);
  const RunResult r = child->wait();
  EXPECT_EQ(r.status, 143) << r.err;
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("interrupted by SIGTERM"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("--save " + (dir / "w")), std::string::npos) << lines[0];
  EXPECT_TRUE(fs::exists(dir / "w"));
  EXPECT_TRUE(fs::exists(dir / "ck/epoch-0001.safetensors"));
}

// Medium 8: a BatchNorm model whose epochs end in a batch of one sample (9 rows, batches of 4)
// failed at the end of epoch 1; refused before training, naming the batch size and the rows.
TEST(CliNeverLose, ABatchNormLastBatchOfOneSampleIsRefusedAtStart) {
  TempDir dir;
  std::string csv = "a,b,label\n";
  for (int i = 0; i < 9; ++i) csv += std::to_string(i) + ",1," + std::to_string(i % 2) + "\n";
  write_text(dir / "d.csv", csv);
  expect_error({"train", "--data", "csv:" + (dir / "d.csv"), "--val-fraction", "0", "--model",
                "Linear(2,4) BatchNorm1d(4) ReLU Linear(4,2)", "--batch-size", "4", "--devices",
                "cpu:0", "--epochs", "2", "--checkpoint-dir", dir / "ck"},
               {"--batch-size 4", "9 training rows", "BatchNorm1d"});
  EXPECT_FALSE(fs::exists(dir / "ck"));
}

// Low: a family named without its parameters says what it takes (it was "unknown layer gpt").
TEST(CliNeverLose, GptOrMlpWithoutItsParametersSaysWhatItTakes) {
  expect_usage_error({"train", "--model", "gpt"}, {"gpt:layers=L,heads=H,embd=C,block=T"});
  expect_usage_error({"train", "--model", "mlp"}, {"mlp:IN,H1,...,OUT"});
}

// Low: a torch.save file given where safetensors are expected is named as such (it was "header
// size ... exceeds the limit").
TEST(CliNeverLose, ATorchSaveFileIsNamedAsSuch) {
  TempDir dir;
  write_text(dir / "w.pt", std::string("PK\x03\x04", 4) + std::string(64, 'x'));
  write_text(dir / "old.pt", std::string("\x80\x02", 2) + std::string(64, 'x'));
  expect_error({"train", "--epochs", "1", "--init", dir / "w.pt"}, {"--init", "torch.save", "zip"});
  expect_error({"eval", "--weights", dir / "old.pt"}, {"--weights", "torch.save", "pickle"});
}

// Low: generate's messages stay one line: a prompt character that is a control character is
// named by its code point, and the default prompt (a newline) is said to be the default.
TEST(CliNeverLose, GenerateMessagesNameControlCharactersAndTheDefaultPrompt) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "abcde";
  write_text(dir / "t.txt", text);  // no newline: not in the vocabulary
  RunResult r = lockstep({"train", "--data", "text:" + (dir / "t.txt"), "--model",
                          "gpt:layers=1,heads=1,embd=8,block=4", "--max-iters", "1",
                          "--batch-size", "2", "--eval-iters", "1", "--save", dir / "g"});
  ASSERT_EQ(r.status, 0) << r.err;
  expect_error({"generate", "--weights", dir / "g", "--max-new-tokens", "1"},
               {"--prompt (default: a newline", "U+000A (a newline)"});
  expect_error({"generate", "--weights", dir / "g", "--prompt", "a\tb", "--max-new-tokens", "1"},
               {"--prompt", "U+0009 (a tab)"});
}

// Low: a second signal ends the run at once with its line (it ended with none).
TEST(CliNeverLose, ASecondSignalEndsTheRunWithALine) {
  TempDir dir;
  const auto child =
      stopped_before_step(3, {"train", "--epochs", "1", "--devices", "cpu:0", "--save", dir / "w"});
  if (::testing::Test::HasFailure()) return;
  // Both pending while stopped; on SIGCONT either may be handled first (two threads may take
  // them at once): one is the first, the other ends the run.
  ::kill(child->pid(), SIGINT);
  ::kill(child->pid(), SIGTERM);
  ::kill(child->pid(), SIGCONT);
  const RunResult r = child->wait();
  EXPECT_TRUE(r.status == 130 || r.status == 143) << r.status << ": " << r.err;
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find(r.status == 143 ? "lockstep: error: interrupted again by SIGTERM while "
                                            "finishing the current step for SIGINT"
                                          : "lockstep: error: interrupted again by SIGINT while "
                                            "finishing the current step for SIGTERM"),
            std::string::npos)
      << lines[0];
  EXPECT_FALSE(fs::exists(dir / "w"));
}

// Low: --metrics /dev/stdout (a stream, not a file) is refused: with stdout redirected to a file
// (as here) the atomic replace replaced that file with the metrics; under a pipe it failed at the
// end of the run.
TEST(CliNeverLose, AStandardStreamIsNoOutputFile) {
  TempDir dir;
  fs::create_symlink("/dev/stdout", dir / "out-link");
  for (const std::string& path : {std::string("/dev/stdout"), std::string("/dev/fd/1"), dir / "out-link"}) {
    const RunResult r = lockstep({"train", "--epochs", "1", "--metrics", path});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_NE(r.err.find("--metrics " + path + ": names a standard stream"), std::string::npos)
        << r.err;
  }
}

// Low: no library function's name leads a message (load_mnist_dir:, init_mpi:).
TEST(CliNeverLose, NoInternalFunctionNameLeadsAMessage) {
  TempDir dir;
  const std::string line = expect_error({"train", "--data", "fashion-mnist:" + (dir / "none"),
                                         "--epochs", "1"},
                                        {"training images not found in"});
  EXPECT_EQ(line.find("load_mnist_dir"), std::string::npos) << line;
}

}  // namespace
}  // namespace lockstep::e2e
