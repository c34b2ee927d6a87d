// `lockstep train` / `lockstep eval` under mpirun (OpenMPI, loopback only): PyTorch's golden
// trajectories on 2 and 4 ranks and on 2 ranks x 2 devices, deterministic mode bit-identical to
// one process with one device, rank 0 the only writer (C10: checkpoints, --save, --metrics) and
// resume on 4 ranks, exact evaluation (10 rows on 3 ranks: 10 evaluated), and faults: a rank
// with bad data (exit 2), a NaN loss on one rank (C11, exit 3 on every rank), a stopped rank
// (exit 4 within --timeout), a killed rank (the job ends at once, non-zero).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <tuple>

#include "e2e/cli_support.h"
#include "lockstep/cuda/runtime.h"
#include "lockstep/io/safetensors.h"
#include "mpirun_env.h"
#include "support/golden.h"
#include "support/golden_cli.h"
#include "support/tolerance.h"

namespace lockstep::e2e {
namespace {

using Clock = std::chrono::steady_clock;

struct Timed {
  RunResult r;
  double seconds = 0;
};

/// mpirun -np `np` lockstep args... ; `env` entries NAME=VALUE are exported to the ranks.
Timed mpirun(int np, const std::vector<std::string>& args,
             const std::vector<std::string>& env = {}) {
  std::vector<std::string> a{"-np", std::to_string(np)};
  for (const auto& e : env) a = a + std::vector<std::string>{"-x", e};
  a.push_back(kCli);
  a = a + args;
  const auto start = Clock::now();
  Timed t;
  t.r = run(LOCKSTEP_MPIEXEC, a);
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return t;
}

std::string bytes_of(const std::string& path) { return read_text(path); }

/// Golden `name` as CSV files and an --init file in `dir`; returns the training flags.
std::vector<std::string> golden_args(const testing::Golden& g, const TempDir& dir) {
  write_text(dir / "train.csv", csv_rows(g, 0, g.n_train));
  write_text(dir / "val.csv", csv_rows(g, g.n_train, g.n_train + g.n_val));
  safetensors::save_state_dict(g.initial, dir / "init.safetensors");
  return std::vector<std::string>{"train",
                                  "--data",
                                  "csv:" + (dir / "train.csv") + "," + (dir / "val.csv"),
                                  "--no-shuffle",
                                  "--model",
                                  golden_model_spec(g),
                                  "--activation",
                                  g.activation,
                                  "--batch-size",
                                  std::to_string(g.batch_size),
                                  "--epochs",
                                  std::to_string(g.epochs),
                                  "--init",
                                  dir / "init.safetensors"} +
         optimizer_flags(g);
}

TEST(MpiCli, GoldenTrajectoriesOnTwoAndFourRanksAndHybrid) {
  for (const std::string& name :
       {std::string("sgd_dampening_batch23"), std::string("mlp_adam_tanh")}) {
    const testing::Golden g = testing::load_golden(name);
    TempDir dir;
    const auto args = golden_args(g, dir);
    struct Layout {
      int np;
      std::string devices;
    };
    for (const Layout& l : {Layout{2, "cpu:0"}, Layout{4, "cpu:0"}, Layout{2, "cpu:0,cpu:1"}}) {
      SCOPED_TRACE(name + " np " + std::to_string(l.np) + " devices " + l.devices);
      const std::string out = dir / ("final" + std::to_string(l.np) + ".safetensors");
      Timed t =
          mpirun(l.np, args + std::vector<std::string>{"--devices", l.devices, "--save", out});
      ASSERT_EQ(t.r.status, 0) << t.r.err;
      auto f = safetensors::load_file(out);
      for (const auto& [pname, expected] : g.final_params)
        EXPECT_TRUE(testing::AllClose(f.at(pname), expected)) << pname;
      // only rank 0 prints: one summary line naming the world size
      std::smatch m;
      int summaries = 0;
      for (const std::string& line : lines_of(t.r.out))
        if (std::regex_search(line, m, std::regex("^done: .* world_size=(\\d+)$"))) {
          ++summaries;
          EXPECT_EQ(m[1], std::to_string(l.np));
        }
      EXPECT_EQ(summaries, 1) << t.r.out;
    }
  }
}

TEST(MpiCli, DeterministicIsBitIdenticalToOneProcessWithOneDevice) {
  const testing::Golden g = testing::load_golden("sgd_dampening_batch23");
  TempDir dir;
  const auto args = golden_args(g, dir) + std::vector<std::string>{"--deterministic"};
  RunResult single = lockstep(args + std::vector<std::string>{"--devices", "cpu:0", "--backend",
                                                              "threads", "--save", dir / "one"});
  ASSERT_EQ(single.status, 0) << single.err;
  const std::string want = bytes_of(dir / "one");
  ASSERT_FALSE(want.empty());
  struct Layout {
    int np;
    std::string devices;
  };
  for (const Layout& l : {Layout{2, "cpu:0"}, Layout{4, "cpu:0"}, Layout{2, "cpu:0,cpu:1"}}) {
    SCOPED_TRACE("np " + std::to_string(l.np) + " devices " + l.devices);
    Timed t = mpirun(
        l.np, args + std::vector<std::string>{"--devices", l.devices, "--save", dir / "many"});
    ASSERT_EQ(t.r.status, 0) << t.r.err;
    EXPECT_TRUE(bytes_of(dir / "many") == want) << "final parameters differ from one process";
  }
  // with dropout: the masks are keyed by the row's index in the global batch, not in the rank's
  const std::vector<std::string> dropout{
      "train", "--deterministic", "--dropout", "0.3",    "--epochs",
      "2",     "--batch-size",    "23",        "--quiet"};
  RunResult one = lockstep(dropout + std::vector<std::string>{"--devices", "cpu:0", "--backend",
                                                              "threads", "--save", dir / "d1"});
  ASSERT_EQ(one.status, 0) << one.err;
  Timed three = mpirun(3, dropout + std::vector<std::string>{"--save", dir / "d3"});
  ASSERT_EQ(three.r.status, 0) << three.r.err;
  EXPECT_TRUE(bytes_of(dir / "d3") == bytes_of(dir / "d1")) << "dropout on 3 ranks";
}

TEST(MpiCli, GptOnTwoRanksIsBitIdenticalToOneProcess) {
  // issue 20: a gpt: model on a text, deterministic mode, dropout; each rank trains its
  // split_batch part of every global batch of windows, rank 0 writes the checkpoints, --save
  // and --metrics; the evaluations are the same numbers.
  TempDir dir;
  std::string text;
  for (int i = 0; i < 120; ++i) text += i % 3 ? "the cat sat on the mat.\n" : "a dog ran off!\n";
  write_text(dir / "t.txt", text);
  const std::vector<std::string> args{"train",
                                      "--data",
                                      "text:" + (dir / "t.txt"),
                                      "--model",
                                      "gpt:layers=2,heads=2,embd=32,block=16,dropout=0.1",
                                      "--max-iters",
                                      "6",
                                      "--eval-interval",
                                      "3",
                                      "--eval-iters",
                                      "2",
                                      "--batch-size",
                                      "12",
                                      "--deterministic",
                                      "--lr-schedule",
                                      "cosine",
                                      "--quiet"};
  RunResult one =
      lockstep(args + std::vector<std::string>{"--devices", "cpu:0", "--backend", "threads",
                                               "--save", dir / "one", "--metrics", dir / "one.m"});
  ASSERT_EQ(one.status, 0) << one.err;
  Timed two =
      mpirun(2, args + std::vector<std::string>{"--save", dir / "two", "--metrics", dir / "two.m",
                                                "--checkpoint-dir", dir / "ck"});
  ASSERT_EQ(two.r.status, 0) << two.r.err;
  ASSERT_FALSE(bytes_of(dir / "one").empty());
  EXPECT_TRUE(bytes_of(dir / "two") == bytes_of(dir / "one")) << "final parameters differ";
  const auto a = lines_of(read_text(dir / "one.m")), b = lines_of(read_text(dir / "two.m"));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = nlohmann::json::parse(a[i]), y = nlohmann::json::parse(b[i]);
    for (const char* key : {"iter", "train_loss", "val_loss", "lr"})
      EXPECT_EQ(x[key], y[key]) << key;
    EXPECT_EQ(y["world_size"], 2);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path() / "ck"))
    names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"iter-000003.safetensors", "iter-000006.safetensors"}));
}

TEST(MpiCli, RankZeroWritesCheckpointsAndFourRanksResumeBitIdentically) {
  // C10: 4 ranks share one checkpoint directory; only rank 0 writes (temporary name, renamed),
  // every rank loads the same file on resume.
  TempDir dir;
  const std::vector<std::string> base{"train", "--deterministic", "--batch-size",
                                      "32",    "--metrics",       dir / "metrics.jsonl"};
  Timed first =
      mpirun(4, base + std::vector<std::string>{"--epochs", "2", "--checkpoint-dir", dir / "ckpt"});
  ASSERT_EQ(first.r.status, 0) << first.r.err;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path() / "ckpt"))
    names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"epoch-0001.safetensors", "epoch-0002.safetensors"}))
      << "one file per epoch, no temporary files left";
  // metrics: written once (rank 0), one line per epoch, world_size 4
  auto lines = lines_of(read_text(dir / "metrics.jsonl"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"world_size\":4"), std::string::npos) << lines[0];

  Timed resumed =
      mpirun(4, base + std::vector<std::string>{"--epochs", "3", "--checkpoint-dir", dir / "ckpt",
                                                "--resume", "--save", dir / "resumed"});
  ASSERT_EQ(resumed.r.status, 0) << resumed.r.err;
  RunResult straight = lockstep(std::vector<std::string>{"train", "--deterministic", "--batch-size",
                                                         "32", "--epochs", "3", "--devices",
                                                         "cpu:0", "--save", dir / "straight"});
  ASSERT_EQ(straight.status, 0) << straight.err;
  EXPECT_TRUE(bytes_of(dir / "resumed") == bytes_of(dir / "straight"));
}

TEST(MpiCli, EvalCountsEverySampleOnceAcrossRanks) {
  TempDir dir;
  std::string csv;
  for (int i = 0; i < 10; ++i)
    csv += std::to_string(i * 0.5) + "," + std::to_string(1.0 - i * 0.25) + "," +
           std::to_string(i % 2) + "\n";
  write_text(dir / "ten.csv", csv);
  RunResult trained = lockstep({"train", "--data", "csv:" + (dir / "ten.csv"), "--val-fraction",
                                "0", "--epochs", "1", "--save", dir / "w", "--quiet"});
  ASSERT_EQ(trained.status, 0) << trained.err;
  const std::vector<std::string> eval{
      "eval", "--data", "csv:" + (dir / "ten.csv"), "--val-fraction", "0", "--weights", dir / "w"};
  RunResult one = lockstep(eval);
  ASSERT_EQ(one.status, 0) << one.err;
  Timed three = mpirun(3, eval);
  ASSERT_EQ(three.r.status, 0) << three.r.err;
  std::smatch a, b;
  const std::regex re("^loss (\\S+) accuracy (\\S+) samples (\\d+)$");
  auto one_lines = lines_of(one.out), three_lines = lines_of(three.r.out);
  ASSERT_EQ(three_lines.size(), 1u) << "rank 0 prints alone: " << three.r.out;
  ASSERT_TRUE(std::regex_search(one_lines.at(0), a, re)) << one.out;
  ASSERT_TRUE(std::regex_search(three_lines[0], b, re)) << three.r.out;
  EXPECT_EQ(b[3], "10");
  EXPECT_NEAR(std::stod(b[1]), std::stod(a[1]), 2e-6);
  EXPECT_EQ(b[2], a[2]);
}

/// Runs a 2-rank training with LOCKSTEP_TEST_FAULT=`fault` and a 10 s timeout.
Timed faulty(const std::string& fault) {
  return mpirun(2, {"train", "--epochs", "3", "--timeout", "10"}, {"LOCKSTEP_TEST_FAULT=" + fault});
}

TEST(MpiCliFaults, BadDataOnOneRankEndsTheJobWithStatus2) {
  Timed t = faulty("data:1:3");
  EXPECT_EQ(t.r.status, 2) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  EXPECT_NE(t.r.err.find("rank 1: "), std::string::npos) << t.r.err;
  EXPECT_NE(t.r.err.find("step 3 "), std::string::npos) << t.r.err;
  // the survivor reports the failed rank and the step (dist::notify_failure)
  bool reported = false;
  for (const std::string& line : lines_of(t.r.err))
    if (line.find("rank 0: ") != std::string::npos &&
        line.find("rank 1 failed: ") != std::string::npos &&
        line.find("step 3 ") != std::string::npos)
      reported = true;
  EXPECT_TRUE(reported) << t.r.err;
}

TEST(MpiCliFaults, NaNOnOneRankStopsEveryRankAtTheSameStep) {
  // C11: the decision is collective; both ranks exit 3 naming rank 1 and step 3.
  Timed t = faulty("nan:1:3");
  EXPECT_EQ(t.r.status, 3) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  for (const std::string who : {"rank 0: ", "rank 1: "}) {
    bool found = false;
    for (const std::string& line : lines_of(t.r.err))
      if (line.find(who) != std::string::npos && line.find("step 3 ") != std::string::npos &&
          line.find("on rank 1") != std::string::npos)
        found = true;
    EXPECT_TRUE(found) << who << "did not report rank 1 / step 3:\n" << t.r.err;
  }
  // each error is one write: the two ranks' lines do not interleave
  for (const std::string& line : lines_of(t.r.err))
    EXPECT_EQ(line.find("lockstep: error: ", 1), std::string::npos) << line;
}

TEST(MpiCliFaults, StoppedRankTimesOutWithStatus4) {
  Timed t = faulty("hang:1:3");
  EXPECT_EQ(t.r.status, 4) << t.r.err;
  EXPECT_LT(t.seconds, 30.0) << "timeout 10 s";
  EXPECT_GE(t.seconds, 9.0);
  EXPECT_NE(t.r.err.find("rank 0: "), std::string::npos) << t.r.err;
  EXPECT_NE(t.r.err.find("timed out"), std::string::npos) << t.r.err;
  EXPECT_NE(t.r.err.find("step 3 "), std::string::npos) << t.r.err;
  EXPECT_NE(t.r.err.find("rank 1"), std::string::npos) << t.r.err;
}

/// The pid of the rank `rank` of a job whose ranks have `mark` (NAME=VALUE) in their
/// environment, or -1.
pid_t rank_pid(const std::string& mark, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string env = read_text(e.path() / "environ");
    std::vector<std::string> vars;
    for (std::size_t p = 0, q; p < env.size(); p = q + 1) {
      q = env.find('\0', p);
      if (q == std::string::npos) q = env.size();
      vars.push_back(env.substr(p, q - p));
    }
    auto has = [&](const std::string& v) {
      return std::find(vars.begin(), vars.end(), v) != vars.end();
    };
    if (has(mark) && has("OMPI_COMM_WORLD_RANK=" + std::to_string(rank)))
      return static_cast<pid_t>(std::stol(e.path().filename().string()));
  }
  return -1;
}

/// The state letter of /proc/PID/stat ('T' stopped), or '?' once it is gone.
char process_state(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

// Rank 1 stops itself at step 3 (SIGSTOP) and is continued once rank 0 has timed out and left:
// rank 0 names rank 1 and the step; rank 1 says it was the one stopped, with the step, instead of
// "no answer from rank 0" (the healthy rank that had given up on it).
TEST(MpiCliFaults, AStoppedAndContinuedRankIsNamedNotTheHealthyOne) {
  const std::string mark = "LOCKSTEP_TEST_MARK=" + std::to_string(::getpid()) + "-stopcont";
  // mpirun ends the job when rank 0 leaves: SIGCONT and SIGTERM to rank 1, then SIGKILL after
  // odls_base_sigkill_timeout (1 s by default, less than rank 1's roll call): 4 s here.
  Child job(LOCKSTEP_MPIEXEC, {"-np", "2", "--mca", "odls_base_sigkill_timeout", "4", "-x",
                               "LOCKSTEP_TEST_FAULT=hang:1:3", "-x", mark, kCli, "train",
                               "--epochs", "3", "--timeout", "4"});
  pid_t zero = -1, one = -1;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while ((zero < 0 || one < 0 || process_state(one) != 'T') && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (zero < 0) zero = rank_pid(mark, 0);
    if (one < 0) one = rank_pid(mark, 1);
  }
  ASSERT_GT(one, 0) << "rank 1 not found";
  ASSERT_EQ(process_state(one), 'T') << "rank 1 did not stop";
  while (process_state(zero) != '?' && process_state(zero) != 'Z' && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // rank 0 times out and leaves
  ::kill(one, SIGCONT);
  const RunResult r = job.wait();
  EXPECT_EQ(r.status, 4) << r.err;
  const std::regex zero_line(R"(rank 0: mpi [a-z_]+ timed out after 4 s on rank 0 of 2: no answer )"
                             R"(from rank 1 \(hung, stopped or dead\) \(at epoch 1 step 3 )");
  EXPECT_TRUE(std::regex_search(r.err, zero_line)) << r.err;
  EXPECT_NE(r.err.find("rank 1: this rank was stopped (SIGSTOP or SIGTSTP) and continued; "
                       "meanwhile the other ranks timed out waiting for it and ended the job (at "
                       "epoch 1 step 3 "),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("no answer from rank 0"), std::string::npos) << r.err;
}

// mpirun ends a job whose rank died by sending SIGCONT, then SIGTERM, to the others; a survivor
// that sees the dead rank's closed connection first (the sockets data path) must name it, not
// claim to have been stopped itself. The SIGCONTs come from here, while rank 0 runs, as early as
// possible: a SIGCONT to a running rank is no stop.
TEST(MpiCliFaults, ASurvivorContinuedWithoutAStopNamesTheDeadRank) {
  const std::string mark = "LOCKSTEP_TEST_MARK=" + std::to_string(::getpid()) + "-cont";
  Child job(LOCKSTEP_MPIEXEC, {"-np", "2", "-x", "LOCKSTEP_TEST_FAULT=die:1:100", "-x", mark, kCli,
                               "train", "--epochs", "8", "--timeout", "10"});
  pid_t zero = -1;
  int sent = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!job.ended_within(std::chrono::milliseconds(5)) && Clock::now() < deadline) {
    if (zero < 0) zero = rank_pid(mark, 0);
    if (zero > 0 && ::kill(zero, SIGCONT) == 0) ++sent;
  }
  const RunResult r = job.wait();
  ASSERT_GT(sent, 10) << "rank 0 was not found running: " << r.err;
  EXPECT_NE(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("rank 0: mpi "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("this rank was stopped"), std::string::npos) << r.err;
}

TEST(MpiCliFaults, KilledRankEndsTheJobAtOnce) {
  Timed t = faulty("die:1:3");
  EXPECT_NE(t.r.status, 0) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  EXPECT_NE(t.r.err.find("rank 1"), std::string::npos) << t.r.err;
}

TEST(MpiCli, RanksStartedWithDifferentFlagsAreRefused) {
  // MPMD: rank 0 and rank 1 run different commands
  Timed t;
  const auto start = Clock::now();
  t.r = run(LOCKSTEP_MPIEXEC, {"-np", "1", kCli, "train", "--lr", "0.1", "--epochs", "1", ":",
                               "-np", "1", kCli, "train", "--lr", "0.01", "--epochs", "1"});
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(t.r.status, 2) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  EXPECT_NE(t.r.err.find("rank 1 started with other training flags or data than rank 0: "
                         "--lr=0.01 on rank 1, --lr=0.1 on rank 0"),
            std::string::npos)
      << t.r.err;
}

// A flag that changes what the ranks do, given to one rank only, is refused before training
// (it trained a whole epoch, then failed with "different collectives", exit 4), naming the flag
// and both values; --save, which rank 0 alone acts on, may be given to rank 0 only (the job
// waited at a barrier rank 1 never reached).
TEST(MpiCli, AFlagGivenToOneRankOnlyIsRefusedBeforeTrainingButSaveMayBe) {
  TempDir dir;
  const std::vector<std::string> common{"train", "--epochs", "1", "--timeout", "10"};
  auto mpmd = [&](const std::vector<std::string>& rank0, const std::vector<std::string>& rank1) {
    std::vector<std::string> a{"-np", "1", kCli};
    a = a + common + rank0 + std::vector<std::string>{":", "-np", "1", kCli} + common + rank1;
    Timed t;
    const auto start = Clock::now();
    t.r = run(LOCKSTEP_MPIEXEC, a);
    t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return t;
  };
  Timed t = mpmd({}, {"--checkpoint-dir", dir / "ck"});
  EXPECT_EQ(t.r.status, 2) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  EXPECT_EQ(t.r.out.find("epoch 1/1"), std::string::npos) << t.r.out;
  EXPECT_NE(t.r.err.find("--checkpoint-dir=" + (dir / "ck") +
                         " on rank 1, --checkpoint-dir=(not given) on rank 0"),
            std::string::npos)
      << t.r.err;
  EXPECT_FALSE(fs::exists(dir / "ck/epoch-0001.safetensors"));
  t = mpmd({"--save", dir / "w"}, {});
  EXPECT_EQ(t.r.status, 0) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  EXPECT_TRUE(fs::exists(dir / "w"));
}

// Issue 39: every flag that changes the run is compared at start-up, --eval-interval and
// --eval-iters of a gpt: model too (the ranks trained, then failed at the first evaluation with
// exit 1); refused with exit 2 naming the flag before any step.
TEST(MpiCli, RanksWithDifferentEvaluationFlagsAreRefusedAtStart) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20; ++i) text += "abcdefgh ijklmnop\n";
  write_text(dir / "t.txt", text);
  const std::vector<std::string> common{"train", "--data", "text:" + (dir / "t.txt"), "--model",
                                        "gpt:layers=1,heads=1,embd=8,block=4", "--max-iters", "4",
                                        "--batch-size", "2", "--timeout", "10", "--eval-iters", "1"};
  for (const auto& [flag, a, b] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--eval-interval", "2", "4"}, {"--eval-iters", "1", "2"}}) {
    std::vector<std::string> args{"-np", "1", kCli};
    args = args + common + std::vector<std::string>{flag, a, ":", "-np", "1", kCli} + common +
           std::vector<std::string>{flag, b};
    const RunResult r = run(LOCKSTEP_MPIEXEC, args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.out.find("iter "), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(flag + "=" + b + " on rank 1, " + flag + "=" + a + " on rank 0"),
              std::string::npos)
        << r.err;
  }
}

// --grad-compression bf16 across 2 ranks (PyTorch's bf16_compress_hook): trains, to other
// weights than float32 reductions; --comm-overlap off gives the same weights as on; ranks that
// disagree on the compression (their reductions would differ) are refused before training.
TEST(MpiCli, GradCompressionBf16TrainsOnTwoRanks) {
  TempDir dir;
  const std::vector<std::string> args{"train",           "--epochs", "2",
                                      "--bucket-cap-mb", "0.00006",  "--quiet"};
  auto trained = [&](const std::vector<std::string>& flags, const std::string& name) {
    Timed t = mpirun(2, args + flags + std::vector<std::string>{"--save", dir / name});
    EXPECT_EQ(t.r.status, 0) << t.r.err;
    EXPECT_NE(t.r.out.find("world_size=2"), std::string::npos) << t.r.out;
    return bytes_of(dir / name);
  };
  const std::string on = trained({"--grad-compression", "bf16"}, "on");
  const std::string off = trained({"--grad-compression", "bf16", "--comm-overlap", "off"}, "off");
  const std::string none = trained({}, "none");
  ASSERT_FALSE(on.empty());
  EXPECT_EQ(on, off) << "--comm-overlap changed the weights";
  EXPECT_NE(on, none) << "--grad-compression bf16 changed nothing";
  RunResult r =
      run(LOCKSTEP_MPIEXEC, {"-np", "1", kCli, "train", "--epochs", "1", "--grad-compression",
                             "bf16", ":", "-np", "1", kCli, "train", "--epochs", "1"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--grad-compression=none on rank 1, --grad-compression=bf16 on rank 0"),
            std::string::npos)
      << r.err;
}

// Without validation data (--val-fraction 0) the ranks' setup check compares the shapes of
// data that exists: the job trains (it failed with "operation on an undefined tensor", exit 2).
TEST(MpiCli, NoValidationDataTrainsOnTwoRanks) {
  Timed t = mpirun(2, {"train", "--val-fraction", "0", "--epochs", "1", "--quiet"});
  EXPECT_EQ(t.r.status, 0) << t.r.err;
  EXPECT_NE(t.r.out.find("val_loss n/a val_acc n/a"), std::string::npos) << t.r.out;
  EXPECT_NE(t.r.out.find("world_size=2"), std::string::npos) << t.r.out;
}

TEST(MpiCli, ThreadsBackendUnderMpirunIsRefused) {
  Timed t = mpirun(2, {"train", "--backend", "threads", "--epochs", "1"});
  EXPECT_EQ(t.r.status, 2) << t.r.err;
  EXPECT_NE(t.r.err.find("--backend threads: this process is one of 2 ranks"), std::string::npos)
      << t.r.err;
}

// --backend nccl under mpirun where NCCL cannot run (no CUDA build, or no GPU): every rank
// refuses before MPI starts, naming what is missing, and the job ends non-zero at once.
TEST(MpiCli, NcclBackendWithoutAGpuEndsTheJob) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present: this probes the refusal";
  Timed t = mpirun(2, {"train", "--backend", "nccl", "--epochs", "1"});
  EXPECT_NE(t.r.status, 0) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  EXPECT_NE(t.r.err.find("lockstep: error: --backend nccl: "), std::string::npos) << t.r.err;
  EXPECT_TRUE(t.r.err.find("no CUDA/NCCL backend") != std::string::npos ||
              t.r.err.find("no usable GPU") != std::string::npos)
      << t.r.err;
}

// A data path that cannot be set up (an interface the host lacks) stops every rank at start-up
// with status 4, naming the rank, the problem and the variables that fix it.
TEST(MpiCli, AnUnusableSocketInterfaceEndsTheJobWithStatus4) {
  Timed t = mpirun(2, {"train", "--epochs", "1"}, {"LOCKSTEP_SOCKET_IFNAME=nosuch0"});
  EXPECT_EQ(t.r.status, 4) << t.r.err;
  EXPECT_LT(t.seconds, 30.0);
  EXPECT_NE(
      t.r.err.find("rank 0 LOCKSTEP_SOCKET_IFNAME=nosuch0 names no IPv4 interface that is up"),
      std::string::npos)
      << t.r.err;
  EXPECT_NE(t.r.err.find("LOCKSTEP_MPI_DATA=mpi"), std::string::npos) << t.r.err;
}

TEST(MpiCli, BackendErrors) {
  RunResult r = lockstep({"train", "--backend", "nccl"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--backend nccl"), std::string::npos) << r.err;
  r = lockstep({"train", "--backend", "gloo"});
  EXPECT_EQ(r.status, 2) << r.err;
  r = lockstep({"train", "--timeout", "0"});
  EXPECT_EQ(r.status, 2) << r.err;
  r = lockstep({"--version"});
  EXPECT_NE(r.out.find("mpi (one rank per process under mpirun)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lockstep::e2e
