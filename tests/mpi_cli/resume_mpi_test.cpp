// --resume without a shared file system, on one machine (no root needed, unlike
// tests/multihost): two ranks in different working directories (mpirun's MPMD form with
// --wdir), so `--checkpoint-dir ckpt` is a different directory on each. Rank 0 writes alone;
// on --resume it reads the checkpoint and broadcasts it, so rank 1, whose directory is empty,
// resumes bit-identically; without a checkpoint on rank 0, every rank names rank 0's reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "e2e/cli_support.h"
#include "mpirun_env.h"

namespace lockstep::e2e {
namespace {

/// mpirun -np 1 --wdir A lockstep ARGS : -np 1 --wdir B lockstep ARGS
RunResult two_ranks_in(const std::string& a, const std::string& b,
                       const std::vector<std::string>& args) {
  std::vector<std::string> cmd;
  for (const std::string* dir : {&a, &b}) {
    if (!cmd.empty()) cmd.push_back(":");
    cmd.insert(cmd.end(), {"-np", "1", "--wdir", *dir, kCli});
    cmd.insert(cmd.end(), args.begin(), args.end());
  }
  return run(LOCKSTEP_MPIEXEC, cmd);
}

TEST(MpiCliResume, RankZeroBroadcastsTheCheckpointToRanksThatCannotSeeIt) {
  TempDir dir;
  fs::create_directories(dir.path() / "a");
  fs::create_directories(dir.path() / "b");
  const std::vector<std::string> train{"train",          "--deterministic", "--batch-size", "32",
                                       "--checkpoint-dir", "ckpt",          "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = train;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  RunResult first = two_ranks_in(dir / "a", dir / "b", with({"--epochs", "2"}));
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_TRUE(fs::exists(dir.path() / "a/ckpt/epoch-0002.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path() / "b/ckpt/epoch-0002.safetensors")) << "rank 1 wrote";

  RunResult resumed =
      two_ranks_in(dir / "a", dir / "b", with({"--epochs", "3", "--resume", "--save", "final"}));
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  RunResult straight = lockstep({"train", "--deterministic", "--batch-size", "32", "--epochs", "3",
                                 "--devices", "cpu:0", "--backend", "threads", "--save",
                                 dir / "straight"});
  ASSERT_EQ(straight.status, 0) << straight.err;
  EXPECT_TRUE(read_text(dir / "a/final") == read_text(dir / "straight"))
      << "2 epochs on 2 ranks + 1 resumed differ from 3 epochs in one process";

  // rank 0's directory emptied: both ranks fail with rank 0's reason, exit 2
  for (const auto& e : fs::directory_iterator(dir.path() / "a/ckpt")) fs::remove(e.path());
  RunResult none = two_ranks_in(dir / "a", dir / "b", with({"--epochs", "4", "--resume"}));
  EXPECT_EQ(none.status, 2) << none.err;
  EXPECT_NE(none.err.find("rank 1: --resume: no checkpoint in ckpt (on rank 0)"),
            std::string::npos)
      << none.err;
}

}  // namespace
}  // namespace lockstep::e2e
