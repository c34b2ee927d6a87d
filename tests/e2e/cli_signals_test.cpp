// End-to-end tests of signals and a closed standard output during `lockstep train` (issue 23):
// a signal during a long set-up was acted on only after the first step (here: never, the data
// still loading from a FIFO), SIGHUP (terminal or ssh closed) killed the run without a
// checkpoint, and `lockstep train | head -1` died of SIGPIPE without writing --save.
#include <sys/stat.h>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::e2e {
namespace {

// Before training starts (here: blocked reading its data from a FIFO that never gets a row)
// SIGINT, SIGTERM and SIGHUP end the run at once with 128 + the signal, one line saying so.
TEST(CliSignalsEarly, BeforeTrainingEverySignalEndsTheRunAtOnce) {
  for (const auto& [signal, name] : std::vector<std::pair<int, std::string>>{
           {SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}}) {
    SCOPED_TRACE(name);
    TempDir dir;
    const std::string fifo = dir / "fifo.csv";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    Child child(kCli, {"train", "--data", "csv:" + fifo, "--checkpoint-dir", dir / "ck"});
    // Opening the FIFO for writing succeeds once lockstep opened it for reading, inside
    // load_data, after the handlers were installed (O_NONBLOCK: ENXIO until then).
    int fd = -1;
    for (int i = 0; i < 2000 && fd < 0; ++i) {
      fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GE(fd, 0) << "lockstep did not open " << fifo;
    ASSERT_EQ(::kill(child.pid(), signal), 0);
    const bool ended = child.ended_within(std::chrono::seconds(10));
    ::close(fd);  // the FIFO stays open (no end of data) until the run has ended or not
    ASSERT_TRUE(ended) << name << " did not end the run within 10 s";
    RunResult r = child.wait();
    EXPECT_EQ(r.status, 128 + signal) << r.err;
    auto lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0], "lockstep: error: interrupted by " + name +
                            " before training started (nothing trained, nothing written)");
    EXPECT_FALSE(fs::exists(dir / "ck/epoch-0001.safetensors"));
  }
}

// SIGHUP during training is SIGTERM's twin: the step ends, a checkpoint of the position is
// written, the status is 129 and the message says where to continue from.
TEST(CliSignalsEarly, SighupCheckpointsAndExits129) {
  TempDir dir;
  const std::string ck = dir / "ck";
  Child child(kCli, {"train", "--batch-size", "1", "--epochs", "60", "--devices", "cpu:0",
                     "--checkpoint-dir", ck});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (child.out_so_far().find('\n') == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(::kill(child.pid(), SIGHUP), 0);
  RunResult r = child.wait();
  EXPECT_EQ(r.status, 129) << r.err;
  auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("interrupted by SIGHUP"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("continue with --resume"), std::string::npos) << lines[0];
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ck)) files.push_back(e.path().filename());
  ASSERT_GE(files.size(), 1u);
  for (const auto& f : files) EXPECT_EQ(f.find(".tmp-"), std::string::npos) << f;
}

// Standard output is a pipe whose reader has gone (`lockstep train | head -0`): the run is not
// killed by SIGPIPE, stops printing, writes --save and --metrics and succeeds silently.
TEST(CliSignalsEarly, ClosedStdoutDoesNotLoseTheRun) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  const std::string err_path = dir / "stderr";
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  const pid_t pid =
      spawn_cli({"train", "--epochs", "3", "--save", dir / "w", "--metrics", dir / "m"}, actions);
  ASSERT_GT(pid, 0);
  ::close(fds[1]);
  ::close(fds[0]);  // the reader is gone before the first line
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "killed by signal " << WTERMSIG(wstatus);
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  EXPECT_EQ(read_text(err_path), "");
  EXPECT_NO_THROW(safetensors::load_file(dir / "w"));
  EXPECT_EQ(lines_of(read_text(dir / "m")).size(), 3u);
}

}  // namespace
}  // namespace lockstep::e2e
