// End-to-end tests of the files `lockstep train` reads and writes: --save / --init / --weights
// (safetensors state_dicts), --checkpoint-dir and --resume (bit-identical continuation, also
// after SIGINT/SIGTERM), the NaN stop, PyTorch interchange, and PyTorch's golden trajectories
// trained through the CLI from CSV files.
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"
#include "support/golden.h"
#include "support/golden_cli.h"
#include "support/tolerance.h"

namespace lockstep::e2e {
namespace {

std::vector<std::string> names_of(const safetensors::File& f) {
  std::vector<std::string> names;
  for (const auto& [name, t] : f.tensors) names.push_back(name);
  return names;
}

/// Runs `args` and expects success.
RunResult ok(const std::vector<std::string>& args) {
  RunResult r = lockstep(args);
  EXPECT_EQ(r.status, 0) << command_text(args) << "\n" << r.err;
  return r;
}

TEST(CliFiles, SaveWritesExactlyTheStateDictAsFloat32) {
  TempDir dir;
  ok({"train", "--epochs", "1", "--save", dir / "w.safetensors"});
  auto f = safetensors::load_file(dir / "w.safetensors");
  EXPECT_EQ(names_of(f), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(f.at("0.weight").shape(), Shape({5, 10}));
  EXPECT_EQ(f.at("2.weight").shape(), Shape({2, 5}));
  for (const auto& [name, t] : f.tensors) EXPECT_EQ(t.dtype(), DType::Float32) << name;
  EXPECT_TRUE(f.metadata.empty());
  // With dropout the Linear layers sit at 0, 3, 6 (Linear, act, Dropout per hidden layer).
  ok({"train", "--epochs", "1", "--model", "mlp:10,6,4,2", "--dropout", "0.5", "--save",
      dir / "d.safetensors"});
  EXPECT_EQ(
      names_of(safetensors::load_file(dir / "d.safetensors")),
      (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "6.weight", "6.bias"}));
}

TEST(CliFiles, UnwritableOutputsAreRefusedBeforeTraining) {
  TempDir dir;
  expect_error({"train", "--save", dir / "no/such/dir/w"}, {"--save", "no/such/dir"});
  expect_error({"train", "--metrics", dir.path().string()}, {"--metrics", "is a directory"});
}

TEST(CliFiles, SameFlagsTwiceGiveBitIdenticalWeights) {
  TempDir dir;
  const std::vector<std::string> args{
      "train",       "--epochs",    "3",    "--dropout",          "0.2", "--model",
      "mlp:10,16,2", "--optimizer", "adam", "--accumulate-steps", "2",   "--save"};
  ok(args + std::vector<std::string>{dir / "a"});
  ok(args + std::vector<std::string>{dir / "b"});
  EXPECT_EQ(read_text(dir / "a"), read_text(dir / "b"));
  ok({"train", "--epochs", "3", "--seed", "1", "--save", dir / "c"});
  EXPECT_NE(read_text(dir / "a"), read_text(dir / "c"));
}

TEST(CliFiles, DeterministicWeightsAreBitIdenticalOnAnyDeviceCount) {
  TempDir dir;
  const std::vector<std::string> args{
      "train",       "--epochs",     "3",  "--deterministic", "--dropout",  "0.2",        "--model",
      "mlp:10,16,2", "--batch-size", "30", "--lr-schedule",   "step:1:0.5", "--momentum", "0.9"};
  ok(args + std::vector<std::string>{"--devices", "cpu:0", "--save", dir / "one"});
  ok(args + std::vector<std::string>{"--devices", "cpu:0,cpu:1,cpu:2", "--save", dir / "three"});
  ASSERT_FALSE(read_text(dir / "one").empty());
  EXPECT_EQ(read_text(dir / "one"), read_text(dir / "three"));
}

TEST(CliFiles, InitLoadsTheGivenParameters) {
  TempDir dir;
  ok({"train", "--epochs", "2", "--seed", "7", "--save", dir / "start"});
  // lr 0: SGD leaves the parameters as loaded, so --save returns --init's bytes.
  ok({"train", "--epochs", "1", "--init", dir / "start", "--lr", "0", "--save", dir / "same"});
  EXPECT_EQ(read_text(dir / "start"), read_text(dir / "same"));
  // Training from --init differs from training from the seed's own initial parameters.
  ok({"train", "--epochs", "1", "--seed", "3", "--init", dir / "start", "--save", dir / "a"});
  ok({"train", "--epochs", "1", "--seed", "3", "--save", dir / "c"});
  EXPECT_NE(read_text(dir / "a"), read_text(dir / "c"));
}

TEST(CliFiles, EvalReportsTheValidationLossOfSavedWeights) {
  TempDir dir;
  RunResult train = ok({"train", "--epochs", "2", "--save", dir / "w"});
  std::smatch m;
  const std::string summary = lines_of(train.out).back();
  ASSERT_TRUE(std::regex_search(summary, m, std::regex(R"(val_loss (\S+) val_acc (\S+),)")));
  RunResult eval = ok({"eval", "--weights", dir / "w"});
  std::smatch e;
  ASSERT_TRUE(std::regex_match(
      eval.out, e, std::regex(R"(loss (\d+\.\d{6}) accuracy (\d\.\d{6}) samples 200\n)")))
      << eval.out;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", std::stod(e[1]));
  EXPECT_EQ(buf, m[1].str());
  std::snprintf(buf, sizeof buf, "%.4f", std::stod(e[2]));
  EXPECT_EQ(buf, m[2].str());
  // --val-fraction 0: all 1000 rows, a different number.
  RunResult all = ok({"eval", "--weights", dir / "w", "--val-fraction", "0"});
  EXPECT_NE(all.out, eval.out);
  // A model with dropout is named as trained (--dropout), evaluated without dropping.
  ok({"train", "--epochs", "1", "--dropout", "0.5", "--save", dir / "d"});
  ok({"eval", "--weights", dir / "d", "--dropout", "0.5"});
  expect_error({"eval", "--weights", dir / "d"}, {"--weights", dir / "d"});
}

// A weights file holding NaN or Inf is refused by eval --weights and train --init (exit 2, the
// tensor and element named), not evaluated as "loss nan" with exit 0 (found by the breaker).
TEST(CliFiles, NonFiniteWeightsAreRefused) {
  TempDir dir;
  ok({"train", "--epochs", "1", "--save", dir / "w"});
  StateDict good = safetensors::to_state_dict(safetensors::load_file(dir / "w"));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    StateDict state;
    for (const auto& [name, t] : good) {
      Tensor c = t.clone();
      if (name == "2.weight") c.data_ptr<float>()[7] = bad;
      state.insert(name, c);
    }
    safetensors::save_state_dict(state, dir / "bad");
    const std::string what = std::isnan(bad) ? "NaN" : "an infinite value";
    expect_error({"eval", "--weights", dir / "bad"},
                 {"--weights", dir / "bad", "'2.weight'", what, "flat index 7"});
    expect_error({"train", "--epochs", "1", "--init", dir / "bad"},
                 {"--init", dir / "bad", "'2.weight'", what, "flat index 7"});
  }
  ok({"eval", "--weights", dir / "w"});  // the file it came from still loads
}

// Finite weights whose logits overflow float32 (3e38 everywhere in the last layer) printed
// `loss -nan` and exited 0 (found by the breaker); PyTorch's loss is NaN too, so eval now stops
// with status 3 as training does on a NaN loss, names the file, and prints no result line.
TEST(CliFiles, EvalOfWeightsWhoseOutputsOverflowExitsWithStatus3) {
  TempDir dir;
  ok({"train", "--epochs", "1", "--save", dir / "w"});
  StateDict state;
  for (const auto& [name, t] : safetensors::to_state_dict(safetensors::load_file(dir / "w"))) {
    Tensor c = t.clone();
    if (name == "2.weight") c.fill_(3e38);
    state.insert(name, c);
  }
  safetensors::save_state_dict(state, dir / "huge");
  RunResult r = lockstep({"eval", "--weights", dir / "huge"});
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(r.out, "");
  for (const std::string& part : {std::string("evaluation loss is NaN"), dir / "huge"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
}

/// Trains `args` for `total` epochs in one go, and again as `first` epochs + --resume up to
/// `total`; expects bit-identical --save files, 4 metrics lines and checkpoints for every epoch.
void expect_resume_is_bit_identical(const std::vector<std::string>& args, int first, int total) {
  TempDir dir;
  const std::string ck = dir / "ck", metrics = dir / "m.jsonl";
  ok(args + std::vector<std::string>{"--epochs", std::to_string(total), "--save", dir / "whole"});
  ok(args + std::vector<std::string>{"--epochs", std::to_string(first), "--checkpoint-dir", ck,
                                     "--metrics", metrics});
  RunResult resumed = ok(
      args + std::vector<std::string>{"--epochs", std::to_string(total), "--checkpoint-dir", ck,
                                      "--resume", "--metrics", metrics, "--save", dir / "resumed"});
  EXPECT_EQ(lines_of(resumed.out).size(), static_cast<std::size_t>(total - first + 1));
  ASSERT_FALSE(read_text(dir / "whole").empty());
  EXPECT_EQ(read_text(dir / "whole"), read_text(dir / "resumed"));
  auto lines = lines_of(read_text(metrics));
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(total));
  for (int i = 0; i < total; ++i)
    EXPECT_EQ(nlohmann::json::parse(lines[static_cast<std::size_t>(i)])["epoch"], i + 1);
  std::vector<std::string> expected;
  for (int e = 1; e <= total; ++e) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "epoch-%04d.safetensors", e);
    expected.push_back(buf);
  }
  std::vector<std::string> got;
  for (const auto& e : fs::directory_iterator(ck)) got.push_back(e.path().filename());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
}

TEST(CliResume, AfterAKillIsBitIdenticalInDefaultMode) {
  expect_resume_is_bit_identical(
      {"train", "--dropout", "0.3", "--model", "mlp:10,8,2", "--optimizer", "adamw",
       "--lr-schedule", "step:1:0.7", "--clip-grad-norm", "1", "--accumulate-steps", "3",
       "--devices", "cpu:0,cpu:1"},
      2, 4);
}

TEST(CliResume, AfterAKillIsBitIdenticalInDeterministicMode) {
  expect_resume_is_bit_identical({"train", "--deterministic", "--dropout", "0.3", "--momentum",
                                  "0.9", "--devices", "cpu:0,cpu:1,cpu:2"},
                                 2, 4);
}

TEST(CliResume, CheckpointHoldsModelOptimizerSchedulerAndPosition) {
  TempDir dir;
  ok({"train", "--epochs", "2", "--momentum", "0.9", "--lr-schedule", "step:1:0.5",
      "--checkpoint-dir", dir / "ck"});
  auto f = safetensors::load_file(dir / "ck/epoch-0002.safetensors");
  for (const char* name :
       {"0.weight", "0.bias", "2.weight", "2.bias", "optimizer.param_groups.0.lr",
        "optimizer.state.0.momentum_buffer", "scheduler.last_epoch"})
    EXPECT_NO_THROW(f.at(name)) << name;
  EXPECT_EQ(f.metadata.at("epoch"), "2");
  EXPECT_EQ(f.metadata.at("batch_in_epoch"), "0");
  EXPECT_EQ(f.metadata.at("global_step"), "50");  // 25 batches of 32 per epoch
  EXPECT_EQ(f.metadata.at("dp_step_count"), "50");
  EXPECT_EQ(f.metadata.at("seed"), "0");
  EXPECT_NE(f.metadata.at("flags").find("--lr-schedule=step:1:0.5"), std::string::npos);
  EXPECT_DOUBLE_EQ(f.at("optimizer.param_groups.0.lr").item(), 0.01 * 0.25);
}

TEST(CliResume, TakesTheNewestCompleteCheckpointAndIgnoresTemporaries) {
  TempDir dir;
  const std::string ck = dir / "ck";
  ok({"train", "--epochs", "2", "--checkpoint-dir", ck});
  write_text(ck + "/epoch-0009.safetensors.tmp-123-abcdef", "half-written");
  write_text(ck + "/notes.txt", "not a checkpoint");
  RunResult r = ok({"train", "--epochs", "3", "--checkpoint-dir", ck, "--resume"});
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;  // epoch 3 and the summary
  EXPECT_EQ(lines[0].rfind("epoch 3/3 ", 0), 0u) << lines[0];
}

TEST(CliResume, RefusesOtherFlagsMissingCheckpointsAndInit) {
  TempDir dir;
  const std::string ck = dir / "ck";
  fs::create_directories(ck);
  expect_error({"train", "--checkpoint-dir", ck, "--resume"}, {"no checkpoint", ck});
  ok({"train", "--epochs", "1", "--checkpoint-dir", ck});
  expect_error({"train", "--epochs", "2", "--checkpoint-dir", ck, "--resume", "--lr", "0.1"},
               {"--lr=0.1", "epoch-0001.safetensors"});
  expect_error(
      {"train", "--checkpoint-dir", ck, "--resume", "--init", ck + "/epoch-0001.safetensors"},
      {"--resume", "--init"});
  write_text(ck + "/epoch-0002.safetensors", "garbage");
  expect_error({"train", "--epochs", "3", "--checkpoint-dir", ck, "--resume"},
               {"epoch-0002.safetensors"});
}

/// Starts a long run, waits for its first epoch line, sends `signal`, and returns the result.
RunResult interrupt(const std::vector<std::string>& args, int signal) {
  Child child(kCli, args);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (child.out_so_far().find('\n') == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(child.pid(), signal);
  return child.wait();
}

void expect_interrupt_then_resume_is_bit_identical(int signal, int status, const std::string& name,
                                                   const std::vector<std::string>& mode) {
  TempDir dir;
  const std::string ck = dir / "ck";
  // Batches of 1: 800 steps per epoch, so the signal lands mid-epoch almost always (either
  // place must resume bit-identically).
  const std::vector<std::string> args =
      std::vector<std::string>{"train", "--batch-size", "1",           "--epochs",
                               "60",    "--devices",    "cpu:0,cpu:1", "--dropout",
                               "0.2",   "--momentum",   "0.5"} +
      mode;
  RunResult r = interrupt(args + std::vector<std::string>{"--checkpoint-dir", ck}, signal);
  ASSERT_EQ(r.status, status) << r.err;
  auto err = lines_of(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_NE(err[0].find("lockstep: error: interrupted by " + name), std::string::npos) << err[0];
  EXPECT_NE(err[0].find(ck), std::string::npos) << err[0];
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ck)) files.push_back(e.path().filename());
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) EXPECT_EQ(f.find(".tmp-"), std::string::npos) << f;
  // Continue for a few epochs past the interruption and compare with one uninterrupted run.
  std::sort(files.begin(), files.end());
  const std::string newest = ck + "/" + files.back();
  EXPECT_NO_THROW(safetensors::load_file(newest));
  const int reached = std::stoi(safetensors::load_file(newest).metadata.at("epoch"));
  const std::string total = std::to_string(reached + 2);
  ok(args + std::vector<std::string>{"--epochs", total, "--checkpoint-dir", ck, "--resume",
                                     "--save", dir / "resumed"});
  ok(args + std::vector<std::string>{"--epochs", total, "--save", dir / "whole"});
  ASSERT_FALSE(read_text(dir / "whole").empty());
  EXPECT_EQ(read_text(dir / "whole"), read_text(dir / "resumed"));
}

TEST(CliSignals, SigintWritesACheckpointAndResumeContinuesBitIdentically) {
  expect_interrupt_then_resume_is_bit_identical(SIGINT, 130, "SIGINT", {});
}

TEST(CliSignals, SigtermInDeterministicModeToo) {
  expect_interrupt_then_resume_is_bit_identical(SIGTERM, 143, "SIGTERM", {"--deterministic"});
}

TEST(CliSignals, WithoutCheckpointDirNothingIsWritten) {
  TempDir dir;
  RunResult r = interrupt(
      {"train", "--batch-size", "1", "--epochs", "200", "--devices", "cpu:0", "--save", dir / "w"},
      SIGINT);
  EXPECT_EQ(r.status, 130) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_FALSE(fs::exists(dir / "w"));
}

TEST(CliNonFinite, LastGoodCheckpointStaysIntact) {
  TempDir dir;
  const std::string ck = dir / "ck";
  RunResult r = lockstep({"train", "--no-shuffle", "--devices", "cpu:0", "--lr", "30",
                          "--checkpoint-dir", ck, "--save", dir / "w", "--metrics", dir / "m"});
  ASSERT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("epoch 2 step"), std::string::npos) << r.err;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ck)) files.push_back(e.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"epoch-0001.safetensors"});
  auto f = safetensors::load_file(ck + "/epoch-0001.safetensors");
  EXPECT_EQ(f.metadata.at("epoch"), "1");
  for (const auto& [name, t] : f.tensors)
    if (t.dtype() == DType::Float32)
      for (std::int64_t i = 0; i < t.numel(); ++i)
        EXPECT_TRUE(std::isfinite(t.data_ptr<float>()[i])) << name;
  EXPECT_FALSE(fs::exists(dir / "w"));
  EXPECT_EQ(lines_of(read_text(dir / "m")).size(), 1u);
}

TEST(CliPyTorch, WeightsFilesAreInterchangeable) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 not installed";
  TempDir dir;
  ok({"train", "--epochs", "1", "--model", "mlp:10,6,2", "--dropout", "0.1", "--save",
      dir / "ours"});
  // PyTorch loads ours strictly into the same nn.Sequential, and writes its own.
  const std::string script =
      "import sys, torch, torch.nn as nn\n"
      "from safetensors.torch import load_file, save_file\n"
      "m = nn.Sequential(nn.Linear(10, 6), nn.ReLU(), nn.Dropout(0.1), nn.Linear(6, 2))\n"
      "m.load_state_dict(load_file(sys.argv[1]), strict=True)\n"
      "torch.manual_seed(5)\n"
      "t = nn.Sequential(nn.Linear(10, 6), nn.ReLU(), nn.Dropout(0.1), nn.Linear(6, 2))\n"
      "save_file(t.state_dict(), sys.argv[2])\n"
      "print(float(m[3].bias[0]))\n";
  write_text(dir / "interop.py", script);
  RunResult py = run("/usr/bin/python3", {dir / "interop.py", dir / "ours", dir / "theirs"});
  if (py.status != 0 && py.err.find("No module named") != std::string::npos)
    GTEST_SKIP() << "PyTorch or safetensors not installed for /usr/bin/python3: " << py.err;
  ASSERT_EQ(py.status, 0) << py.err;
  auto ours = safetensors::load_file(dir / "ours");
  EXPECT_NEAR(std::stod(py.out), ours.at("3.bias").data_ptr<float>()[0], 1e-7);
  // Ours accepts PyTorch's file: with lr 0 the saved weights are PyTorch's, bit for bit.
  ok({"train", "--epochs", "1", "--model", "mlp:10,6,2", "--dropout", "0.1", "--lr", "0", "--init",
      dir / "theirs", "--save", dir / "back"});
  auto theirs = safetensors::load_file(dir / "theirs");
  auto back = safetensors::load_file(dir / "back");
  for (const auto& [name, t] : theirs.tensors)
    EXPECT_TRUE(testing::BitEqual(back.at(name), t)) << name;
}

/// Trains golden `name` through the CLI (CSV files, --init, --no-shuffle) and compares the final
/// parameters and the per-epoch validation losses with PyTorch's.
void expect_golden_trajectory(const std::string& name, const std::vector<std::string>& mode) {
  SCOPED_TRACE(name);
  const testing::Golden g = testing::load_golden(name);
  TempDir dir;
  write_text(dir / "train.csv", csv_rows(g, 0, g.n_train));
  write_text(dir / "val.csv", csv_rows(g, g.n_train, g.n_train + g.n_val));
  safetensors::save_state_dict(g.initial, dir / "init.safetensors");
  std::string model = "mlp:";
  for (std::size_t i = 0; i < g.sizes.size(); ++i)
    model += (i ? "," : "") + std::to_string(g.sizes[i]);
  const std::vector<std::string> args =
      std::vector<std::string>{"train",
                               "--data",
                               "csv:" + (dir / "train.csv") + "," + (dir / "val.csv"),
                               "--no-shuffle",
                               "--model",
                               model,
                               "--activation",
                               g.activation,
                               "--batch-size",
                               std::to_string(g.batch_size),
                               "--epochs",
                               std::to_string(g.epochs),
                               "--init",
                               dir / "init.safetensors",
                               "--save",
                               dir / "final.safetensors",
                               "--devices",
                               "cpu:0,cpu:1"} +
      optimizer_flags(g) + mode;
  RunResult r = ok(args);
  auto f = safetensors::load_file(dir / "final.safetensors");
  ASSERT_EQ(f.tensors.size(), g.final_params.size());
  for (const auto& [pname, expected] : g.final_params)
    EXPECT_TRUE(testing::AllClose(f.at(pname), expected)) << pname;
  // Validation loss after each epoch, as printed (4 decimals).
  std::vector<double> printed;
  std::smatch m;
  for (const std::string& line : lines_of(r.out))
    if (std::regex_search(line, m, std::regex(R"(^epoch \d+/\d+ .* val_loss (\S+) )")))
      printed.push_back(std::stod(m[1]));
  ASSERT_EQ(printed.size(), g.val_losses.size());
  for (std::size_t e = 0; e < printed.size(); ++e)
    EXPECT_NEAR(printed[e], g.val_losses[e], 0.5e-4 + 1e-6) << "epoch " << e + 1;
}

TEST(CliGolden, PyTorchTrajectoriesThroughCsvAndInit) {
  for (const std::string& name : testing::golden_names()) expect_golden_trajectory(name, {});
}

TEST(CliGolden, PyTorchTrajectoriesThroughCsvAndInitDeterministic) {
  for (const std::string& name : testing::golden_names())
    expect_golden_trajectory(name, {"--deterministic"});
}

}  // namespace
}  // namespace lockstep::e2e
