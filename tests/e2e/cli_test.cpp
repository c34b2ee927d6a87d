// End-to-end tests of `lockstep train` / `lockstep eval` on the synthetic data: the flags, the
// output formats (epoch lines, --quiet summary, --metrics JSON lines), exit statuses and the
// reference program. The binary is run as a user would run it (cli_support.h).
#include <link.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <strings.h>

#include "cli_support.h"
#include "lockstep/core/blas.h"
#include "lockstep/dist/mpi.h"

namespace lockstep::e2e {
namespace {

const std::regex kEpochLine(
    R"(^epoch (\d+)/(\d+) train_loss (\d+\.\d{4}) val_loss (\d+\.\d{4}|n/a) val_acc (\d\.\d{4}|n/a) samples/s (\d+)$)");
const std::regex kSummary(
    R"(^done: (\d+) epochs, val_loss (\d+\.\d{4}|n/a) val_acc (\d\.\d{4}|n/a), (\d+\.\d) s, devices=([a-z0-9:,]+) world_size=1$)");

/// Checks stdout: `epochs` epoch lines (numbered 1..epochs of `total`) then the summary line.
/// Returns the lines without their samples/s field (which varies from run to run).
std::vector<std::string> expect_epoch_lines(const RunResult& r, int epochs, int total) {
  auto lines = lines_of(r.out);
  EXPECT_EQ(lines.size(), static_cast<std::size_t>(epochs) + 1) << r.out;
  std::vector<std::string> stable;
  for (int k = 1; k <= epochs && k <= static_cast<int>(lines.size()); ++k) {
    std::smatch m;
    const std::string& line = lines[static_cast<std::size_t>(k - 1)];
    EXPECT_TRUE(std::regex_match(line, m, kEpochLine)) << "line " << k << ": " << line;
    if (m.empty()) continue;
    EXPECT_EQ(m[1].str(), std::to_string(k));
    EXPECT_EQ(m[2].str(), std::to_string(total));
    stable.push_back(line.substr(0, line.find(" samples/s")));
  }
  if (!lines.empty()) {
    EXPECT_TRUE(std::regex_match(lines.back(), kSummary)) << lines.back();
  }
  return stable;
}

/// The val_loss fields of the epoch lines.
std::vector<std::string> val_losses(const RunResult& r) {
  std::vector<std::string> v;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, kEpochLine)) v.push_back(m[4].str());
  }
  return v;
}

TEST(CliTrain, DefaultsRunTenEpochsOnTheSyntheticData) {
  RunResult r = lockstep({"train"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  expect_epoch_lines(r, 10, 10);
  // The default shuffle still trains the reference model on its data: the loss of random labels
  // stays near ln 2 and the summary names the default devices.
  for (const std::string& v : val_losses(r)) {
    EXPECT_GT(std::stod(v), 0.6);
    EXPECT_LT(std::stod(v), 0.8);
  }
}

TEST(CliTrain, NoShuffleReproducesTheReferenceProgram) {
  if (!fs::exists(kExample)) GTEST_SKIP() << kExample << " not built (LOCKSTEP_BUILD_EXAMPLES=OFF)";
  RunResult example = run(kExample, {});
  ASSERT_EQ(example.status, 0) << example.err;
  std::vector<std::string> expected;
  for (const std::string& line : lines_of(example.out))
    expected.push_back(line.substr(line.rfind(' ') + 1));  // "Epoch k, Validation Loss: x.xxxx"
  ASSERT_EQ(expected.size(), 10u);
  RunResult cli = lockstep({"train", "--no-shuffle"});
  ASSERT_EQ(cli.status, 0) << cli.err;
  EXPECT_EQ(val_losses(cli), expected);
}

TEST(CliTrain, ShuffleIsOnByDefaultAndKeyedBySeed) {
  RunResult shuffled = lockstep({"train", "--epochs", "3"});
  RunResult ordered = lockstep({"train", "--epochs", "3", "--no-shuffle"});
  ASSERT_EQ(shuffled.status, 0) << shuffled.err;
  ASSERT_EQ(ordered.status, 0) << ordered.err;
  EXPECT_NE(val_losses(shuffled), val_losses(ordered));
  RunResult again = lockstep({"train", "--epochs", "3"});
  EXPECT_EQ(expect_epoch_lines(again, 3, 3), expect_epoch_lines(shuffled, 3, 3));
}

TEST(CliTrain, EpochsFlagStopsEarlierOnTheSameTrajectory) {
  RunResult two = lockstep({"train", "--epochs", "2"});
  RunResult four = lockstep({"train", "--epochs", "4"});
  ASSERT_EQ(two.status, 0) << two.err;
  ASSERT_EQ(four.status, 0) << four.err;
  auto a = expect_epoch_lines(two, 2, 2), b = expect_epoch_lines(four, 4, 4);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 4u);
  for (std::size_t i = 0; i < 2; ++i)  // same numbers, only "/2" vs "/4" differs
    EXPECT_EQ(a[i].substr(a[i].find(" train_loss")), b[i].substr(b[i].find(" train_loss")));
}

TEST(CliTrain, QuietPrintsOnlyTheSummary) {
  RunResult r = lockstep({"train", "--epochs", "3", "--quiet", "--devices", "cpu:0,cpu:2"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_match(lines[0], m, kSummary)) << lines[0];
  EXPECT_EQ(m[1].str(), "3");
  EXPECT_EQ(m[5].str(), "cpu:0,cpu:2");
  // The summary reports the last epoch's validation numbers.
  RunResult full = lockstep({"train", "--epochs", "3", "--devices", "cpu:0,cpu:2"});
  ASSERT_EQ(full.status, 0) << full.err;
  EXPECT_EQ(lines_of(full.out).back().substr(0, 40), lines[0].substr(0, 40));
  EXPECT_EQ(val_losses(full).back(), m[2].str());
}

TEST(CliTrain, ValFractionZeroTurnsValidationOff) {
  RunResult r = lockstep({"train", "--epochs", "2", "--val-fraction", "0"});
  ASSERT_EQ(r.status, 0) << r.err;
  expect_epoch_lines(r, 2, 2);
  for (const std::string& line : lines_of(r.out))
    EXPECT_NE(line.find("val_loss n/a val_acc n/a"), std::string::npos) << line;
}

TEST(CliTrain, MetricsFileHasOneJsonObjectPerEpoch) {
  TempDir dir;
  const std::string metrics = dir / "m.jsonl";
  write_text(metrics, "stale line from an earlier run\n");
  RunResult r = lockstep(
      {"train", "--epochs", "3", "--devices", "cpu:0,cpu:1", "--metrics", metrics, "--quiet"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(read_text(metrics));
  ASSERT_EQ(lines.size(), 3u);
  const std::set<std::string> keys{"epoch",        "train_loss",         "val_loss",
                                   "val_accuracy", "samples_per_second", "seconds",
                                   "devices",      "world_size"};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto j = nlohmann::json::parse(lines[i]);
    std::set<std::string> got;
    for (auto it = j.begin(); it != j.end(); ++it) got.insert(it.key());
    EXPECT_EQ(got, keys) << lines[i];
    EXPECT_EQ(j["epoch"], static_cast<int>(i + 1));
    EXPECT_TRUE(j["train_loss"].is_number());
    EXPECT_TRUE(j["val_loss"].is_number());
    EXPECT_GE(j["val_accuracy"].get<double>(), 0.0);
    EXPECT_LE(j["val_accuracy"].get<double>(), 1.0);
    EXPECT_GT(j["samples_per_second"].get<double>(), 0.0);
    EXPECT_GT(j["seconds"].get<double>(), 0.0);
    EXPECT_EQ(j["devices"], nlohmann::json({"cpu:0", "cpu:1"}));
    EXPECT_EQ(j["world_size"], 1);
  }
  // Without validation the val values are null.
  RunResult off = lockstep({"train", "--epochs", "1", "--val-fraction", "0", "--metrics", metrics});
  ASSERT_EQ(off.status, 0) << off.err;
  auto j = nlohmann::json::parse(lines_of(read_text(metrics)).at(0));
  EXPECT_TRUE(j["val_loss"].is_null());
  EXPECT_TRUE(j["val_accuracy"].is_null());
  // The printed line agrees with the metrics (4 decimals).
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", j["train_loss"].get<double>());
  EXPECT_NE(off.out.find(std::string("train_loss ") + buf), std::string::npos) << off.out;
}

TEST(CliTrain, EveryFlagChangesTheRun) {
  const std::vector<std::string> base{"train", "--epochs", "2", "--devices", "cpu:0"};
  RunResult reference = lockstep(base);
  ASSERT_EQ(reference.status, 0) << reference.err;
  const auto expected = expect_epoch_lines(reference, 2, 2);
  const std::vector<std::vector<std::string>> variants{
      {"--seed", "1"},
      {"--lr", "0.1"},
      {"--batch-size", "7"},
      {"--no-shuffle"},
      {"--val-fraction", "0.5"},
      {"--model", "mlp:10,7,2"},
      {"--model", "mlp:10,2"},
      {"--model", "mlp:10,4,3,2"},
      {"--activation", "tanh"},
      {"--activation", "sigmoid"},
      {"--activation", "gelu"},
      {"--dropout", "0.3"},
      {"--optimizer", "adam"},
      {"--optimizer", "adamw"},
      {"--optimizer", "adam", "--weight-decay", "0.5"},
      {"--optimizer", "adam", "--betas", "0.5,0.9"},
      {"--optimizer", "adam", "--eps", "0.1"},
      {"--momentum", "0.9"},
      {"--momentum", "0.9", "--dampening", "0.5"},
      {"--momentum", "0.9", "--nesterov"},
      {"--weight-decay", "0.5"},
      {"--lr-schedule", "step:1:0.1"},
      {"--lr-schedule", "cosine"},
      {"--clip-grad-norm", "0.001"},
      {"--accumulate-steps", "3"},
  };
  for (const auto& flags : variants) {
    const auto args = base + flags;
    SCOPED_TRACE(command_text(args));
    RunResult r = lockstep(args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(expect_epoch_lines(r, 2, 2), expected) << "made no difference";
  }
  // Flags that change nothing numerically show in the output in their own way.
  RunResult devices = lockstep(base + std::vector<std::string>{"--devices", "cpu:3,cpu:1"});
  ASSERT_EQ(devices.status, 0) << devices.err;
  EXPECT_NE(devices.out.find("devices=cpu:3,cpu:1 world_size=1"), std::string::npos);
}

TEST(CliTrain, SameSettingsGiveTheSameNumbers) {
  // --optimizer sgd and its default lr are the defaults; repeating a flag keeps the last value.
  RunResult a = lockstep({"train", "--epochs", "2"});
  RunResult b = lockstep({"train", "--epochs", "2", "--optimizer", "sgd", "--lr", "0.01",
                          "--batch-size", "5", "--batch-size", "32"});
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(expect_epoch_lines(a, 2, 2), expect_epoch_lines(b, 2, 2));
}

TEST(CliTrain, DeterministicModeGivesTheSameNumbersOnAnyDeviceCount) {
  std::vector<std::vector<std::string>> runs;
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2"}) {
    RunResult r = lockstep({"train", "--epochs", "3", "--deterministic", "--dropout", "0.2",
                            "--batch-size", "20", "--devices", devices});
    ASSERT_EQ(r.status, 0) << r.err;
    runs.push_back(expect_epoch_lines(r, 3, 3));
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
}

TEST(CliTrain, NonFiniteLossStopsWithStatus3) {
  // lr 30 on one device: epoch 1 ends with a huge but finite loss, epoch 2 overflows.
  RunResult r = lockstep({"train", "--no-shuffle", "--devices", "cpu:0", "--lr", "30"});
  EXPECT_EQ(r.status, 3) << r.err;
  auto err = lines_of(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_NE(err[0].find("lockstep: error: training loss is"), std::string::npos) << err[0];
  EXPECT_NE(err[0].find("epoch 2 step "), std::string::npos) << err[0];
  EXPECT_EQ(lines_of(r.out).size(), 1u) << r.out;  // epoch 1's line, no summary
}

TEST(CliUsage, UnknownFlagOrCommand) {
  expect_usage_error({"train", "--no-such-flag"}, {"'--no-such-flag'", "lockstep train --help"});
  expect_usage_error({"eval", "--no-such-flag"}, {"'--no-such-flag'", "lockstep eval --help"});
  expect_usage_error({}, {"missing command"});
  expect_usage_error({"no-such-command"}, {"'no-such-command'"});
}

TEST(CliUsage, BadValues) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--batch-size", "0"},
                                             {"--lr", "-1"},
                                             {"--lr", "nan"},
                                             {"--epochs", "0"},
                                             {"--epochs", "two"},
                                             {"--seed", "-1"},
                                             {"--epochs"},
                                             {"--momentum", "inf"},
                                             {"--dropout", "1"},
                                             {"--val-fraction", "1"},
                                             {"--accumulate-steps", "0"},
                                             {"--clip-grad-norm", "0"},
                                             {"--betas", "0.9"},
                                             {"--betas", "0.9,1"},
                                             {"--label-column", "x"},
                                             {"--activation", "swish"},
                                             {"--optimizer", "rmsprop"},
                                             {"--model", "mlp:10,0,2"},
                                             {"--model", "cnn:10,2"},
                                             {"--model", "mlp:10"},
                                             {"--data", "mnist"},
                                             {"--data", "csv:"},
                                             {"--data", "idx:a"},
                                             {"--lr-schedule", "step:0:0.5"},
                                             {"--lr-schedule", "linear"},
                                             {"--lr-schedule", "step:2"}})
    expect_usage_error(std::vector<std::string>{"train"} + args, {args[0]});
}

TEST(CliUsage, UnknownDevice) {
  expect_usage_error({"train", "--devices", "gpu:0"}, {"gpu:0"});
  expect_usage_error({"train", "--devices", "cpu:0,cpu:0"}, {"cpu:0"});
  expect_usage_error({"train", "--devices", "cuda:0"}, {"--devices", "cuda"});
  expect_usage_error({"train", "--devices", "cpu:0,"}, {"--devices", "empty device name"});
  expect_usage_error({"train", "--devices", ""});
}

TEST(CliUsage, InconsistentFlags) {
  expect_error({"train", "--optimizer", "adam", "--momentum", "0.9"}, {"--momentum", "sgd"});
  expect_error({"train", "--betas", "0.8,0.9"}, {"--betas", "adam"});
  expect_error({"train", "--nesterov"}, {"nesterov"});
  expect_error({"train", "--resume"}, {"--resume", "--checkpoint-dir"});
  expect_error({"train", "--resume", "--checkpoint-dir", "x", "--init", "y"},
               {"--resume", "--init"});
  expect_error({"eval", "--model", "mlp:10,5,2"}, {"--weights"});
}

TEST(CliUsage, ModelMustFitTheData) {
  expect_error({"train", "--model", "mlp:9,5,2"}, {"mlp:9,5,2", "input width 9", "10 features"});
  expect_error({"train", "--model", "mlp:10,5,3"}, {"mlp:10,5,3", "output width 3", "2 classes"});
}

// Unsets OPENBLAS_CORETYPE for the CLI processes a test starts (they inherit the environment)
// and puts back the test process's own value, if any, when the test ends.
class WithoutOpenBlasCoreType {
 public:
  WithoutOpenBlasCoreType() {
    if (const char* v = std::getenv("OPENBLAS_CORETYPE")) saved = v;
    ::unsetenv("OPENBLAS_CORETYPE");
  }
  ~WithoutOpenBlasCoreType() {
    if (saved)
      ::setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
    else
      ::unsetenv("OPENBLAS_CORETYPE");
  }
  WithoutOpenBlasCoreType(const WithoutOpenBlasCoreType&) = delete;
  WithoutOpenBlasCoreType& operator=(const WithoutOpenBlasCoreType&) = delete;
  std::optional<std::string> saved;
};

// Debian's OpenBLAS 0.3.21 maps CPU models it does not know (a 5th-generation Xeon, family 6
// model 207) to its generic Prescott kernels, ~6x slower GEMMs than the Cooperlake kernels it
// carries. The CLI starts again with OPENBLAS_CORETYPE set to what OpenBLAS's own feature fallback
// picks (lockstep/core/blas.h); `--version` names the kernels. A user's OPENBLAS_CORETYPE is kept.
TEST(CliInfo, OpenBlasKernelsFitTheCpu) {
  const WithoutOpenBlasCoreType restore;

  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  RunResult r = lockstep({"--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("OpenBLAS kernels: Prescott (OPENBLAS_CORETYPE=Prescott)"),
            std::string::npos)
      << r.out;

  // What OpenBLAS chose by itself is known when this test process was started without the
  // variable (it never restarts itself): the CLI must keep that choice, or replace Prescott.
  if (restore.saved) GTEST_SKIP() << "OPENBLAS_CORETYPE is set for the test process";
  ::unsetenv("OPENBLAS_CORETYPE");
  r = lockstep({"--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string own = openblas_core(), for_cpu = openblas_coretype_for_cpu();
  const std::string set = openblas_coretype_to_set(false, own, for_cpu);
  std::string expected = "OpenBLAS kernels: " + own + " (chosen by OpenBLAS from the CPU model)";
  if (!set.empty()) {
    const auto at = r.out.find("OpenBLAS kernels: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_EQ(strcasecmp(line.c_str(), ("OpenBLAS kernels: " + set + " (OPENBLAS_CORETYPE=" +
                                         set + ")").c_str()),
              0)
        << line << " (OpenBLAS chose " << own << ")";
  } else {
    EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
  }
}

// Started through the dynamic loader (`/lib64/ld-linux-x86-64.so.2 lockstep train ...`, as with
// ld.so's --library-path), /proc/self/exe is the loader: the OpenBLAS restart re-ran the loader
// with lockstep's arguments, so `train` was taken for the program to load (exit 127, "train:
// cannot open shared object file") and `--version` printed ld.so's version. The CLI must run as
// started, with or without the restart.
TEST(CliInfo, RunsWhenStartedThroughTheDynamicLoader) {
  std::string loader;  // this test binary's PT_INTERP, the loader lockstep uses too
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        for (int k = 0; k < info->dlpi_phnum; ++k)
          if (info->dlpi_phdr[k].p_type == PT_INTERP)
            *static_cast<std::string*>(out) =
                reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[k].p_vaddr);
        return 1;  // the main program only
      },
      &loader);
  if (loader.empty()) GTEST_SKIP() << "statically linked";
  // Without OPENBLAS_CORETYPE, so that a CPU OpenBLAS maps to Prescott restarts.
  const WithoutOpenBlasCoreType restore;

  RunResult r = run(loader, {kCli, "--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("lockstep ", 0), 0u) << r.out;
  r = run(loader, {kCli, "train", "--epochs", "1", "--quiet"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("done: 1 epochs"), std::string::npos) << r.out;
}

// The OpenBLAS restart exec'd "/proc/self/exe", and the kernel names a process after the file
// name it was exec'd by: a training process was called "exe" (/proc/PID/comm; ps, top, pgrep -x
// lockstep, killall lockstep and pkill -x lockstep did not find it). It must keep its name.
TEST(CliInfo, KeepsItsProcessNameAcrossTheOpenBlasRestart) {
  // Without OPENBLAS_CORETYPE, so that a CPU OpenBLAS maps to Prescott restarts.
  const WithoutOpenBlasCoreType restore;

  Child child(kCli, {"train", "--epochs", "1000000", "--quiet"});
  // The restart happens first thing in main(); well before the half second is over.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string comm = read_text("/proc/" + std::to_string(child.pid()) + "/comm");
  EXPECT_EQ(comm, "lockstep\n");
}

TEST(CliInfo, VersionNamesTheVersionAndBackends) {
  RunResult r = lockstep({"--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(std::string("lockstep ") + LOCKSTEP_VERSION), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backends built: threads"), std::string::npos) << r.out;
  // MPI is listed as built exactly when this build has it; with -DLOCKSTEP_CUDA=ON cuda:k
  // tensors and DataParallel on GPUs are, NCCL across processes is not built yet.
  EXPECT_EQ(r.out.find(", mpi (one rank per process under mpirun)") != std::string::npos,
            dist::mpi_available())
      << r.out;
  EXPECT_NE(r.out.find("not built: "), std::string::npos) << r.out;
#ifdef LOCKSTEP_HAS_CUDA
  EXPECT_NE(r.out.find(", cuda (cuda:k tensors; DataParallel over the GPUs of one process"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("NCCL across processes"), std::string::npos) << r.out;
#else
  EXPECT_NE(r.out.find("NCCL/CUDA"), std::string::npos) << r.out;
#endif
}

TEST(CliInfo, HelpDocumentsEveryFlagWithItsDefault) {
  RunResult top = lockstep({"--help"});
  EXPECT_EQ(top.status, 0) << top.err;
  EXPECT_NE(top.out.find("train"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("eval"), std::string::npos) << top.out;
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands{
      {"train",
       {"--data",           "--label-column",   "--val-fraction",     "--seed",       "--model",
        "--activation",     "--dropout",        "--optimizer",        "--lr",         "--momentum",
        "--dampening",      "--nesterov",       "--weight-decay",     "--betas",      "--eps",
        "--lr-schedule",    "--clip-grad-norm", "--accumulate-steps", "--batch-size", "--epochs",
        "--no-shuffle",     "--deterministic",  "--devices",          "--init",       "--save",
        "--checkpoint-dir", "--resume",         "--metrics",          "--quiet"}},
      {"eval",
       {"--data", "--label-column", "--val-fraction", "--seed", "--model", "--activation",
        "--dropout", "--weights"}}};
  for (const auto& [command, flags] : commands) {
    RunResult r = lockstep({command, "--help"});
    EXPECT_EQ(r.status, 0) << r.err;
    for (const std::string& flag : flags) {
      // The flag's line (CLI11 prints "  --flag TYPE   description (default: ...)").
      const auto pos = r.out.find("  " + flag + " ");
      const auto pos_eol = r.out.find("  " + flag + "\n");
      ASSERT_TRUE(pos != std::string::npos || pos_eol != std::string::npos)
          << command << " help misses " << flag;
      const auto start = pos != std::string::npos ? pos : pos_eol;
      const std::string line = r.out.substr(start, r.out.find('\n', start) - start);
      EXPECT_NE(line.find("(default: "), std::string::npos) << command << ": " << line;
    }
  }
  RunResult train = lockstep({"train", "--help"});
  for (const char* expected : {"(default: synthetic)", "(default: 32)", "(default: 10)",
                               "(default: 0.01 for sgd, 0.001 for adam/adamw)", "(default: relu)",
                               "(default: constant)", "(default: 0.9,0.999)", "(default: 1e-08)"})
    EXPECT_NE(train.out.find(expected), std::string::npos) << "missing " << expected;
}

}  // namespace
}  // namespace lockstep::e2e
