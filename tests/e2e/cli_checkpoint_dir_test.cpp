// End-to-end tests of one --checkpoint-dir shared by two runs (issue 23): a fresh run into a
// directory holding another run's checkpoints made the next --resume continue the older run; two
// live runs on one directory overwrote each other's checkpoints; temporaries of a killed run
// stayed forever.
#include "cli_support.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::e2e {
namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CliCheckpointDir, FreshRunRefusesADirectoryHoldingCheckpoints) {
  TempDir dir;
  const std::string ck = dir / "ck";
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--checkpoint-dir", ck}).status, 0);
  const std::string first = read_text(ck + "/epoch-0001.safetensors");
  RunResult r = lockstep({"train", "--epochs", "1", "--seed", "3", "--checkpoint-dir", ck});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  for (const std::string& m : {ck, std::string("epoch-0001.safetensors"), std::string("--resume"),
                               std::string("new directory")})
    EXPECT_NE(lines[0].find(m), std::string::npos) << m << " missing in " << lines[0];
  EXPECT_EQ(read_text(ck + "/epoch-0001.safetensors"), first);
  // The way out works: --resume continues it.
  r = lockstep({"train", "--epochs", "2", "--checkpoint-dir", ck, "--resume"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(names_in(ck),
            (std::vector<std::string>{"epoch-0001.safetensors", "epoch-0002.safetensors"}));
}

// A run holds its directory's lock while it lives (here: stopped at step 3 by the test hook);
// a second run on the same directory is refused before training, naming it.
TEST(CliCheckpointDir, ASecondLiveRunIsKeptOut) {
  TempDir dir;
  const std::string ck = dir / "ck";
  ::setenv("LOCKSTEP_TEST_FAULT", "hang:0:3", 1);
  Child first(kCli, {"train", "--epochs", "1", "--devices", "cpu:0", "--checkpoint-dir", ck});
  ::unsetenv("LOCKSTEP_TEST_FAULT");
  int wstatus = 0;
  ASSERT_EQ(::waitpid(first.pid(), &wstatus, WUNTRACED), first.pid());
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  RunResult second = lockstep({"train", "--epochs", "1", "--checkpoint-dir", ck});
  ::kill(first.pid(), SIGCONT);
  EXPECT_EQ(second.status, 2) << second.err;
  EXPECT_EQ(second.out, "");
  EXPECT_NE(second.err.find("--checkpoint-dir " + ck + " is in use by another lockstep run"),
            std::string::npos)
      << second.err;
  RunResult r = first.wait();
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(names_in(ck), std::vector<std::string>{"epoch-0001.safetensors"});
}

// Temporaries whose writer is dead are removed by the next run on the directory; one whose
// writer still runs (this test process) is left alone.
TEST(CliCheckpointDir, TemporariesOfDeadWritersAreRemoved) {
  TempDir dir;
  const std::string ck = dir / "ck";
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--checkpoint-dir", ck}).status, 0);
  Child gone("/bin/true", {});
  const pid_t dead = gone.pid();
  gone.wait();
  const std::string stale = "epoch-0002.safetensors.tmp-" + std::to_string(dead) + "-1f2e";
  const std::string live = "epoch-0002.safetensors.tmp-" + std::to_string(::getpid()) + "-3a";
  write_text(ck + "/" + stale, "half-written");
  write_text(ck + "/" + live, "being written");
  RunResult r = lockstep({"train", "--epochs", "1", "--checkpoint-dir", ck, "--resume"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(names_in(ck), (std::vector<std::string>{"epoch-0001.safetensors", live}));
}

}  // namespace
}  // namespace lockstep::e2e
