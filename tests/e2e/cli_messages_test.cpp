// End-to-end tests of messages a user can act on (issue 23): values echoed as typed (a resumed
// run said "--momentum=0.80000000000000004"), no internal function names ("load_state_dict into
// Sequential", "read_file"), a checkpoint given where weights are expected said only "unexpected
// key(s) 'optimizer.state...'", and a progress bar wider than the terminal wrapped into a new
// line at every redraw.
#include <sys/ioctl.h>
#include <termios.h>

#include "cli_support.h"

namespace lockstep::e2e {
namespace {

/// Names of code, not of anything the user gave.
const std::regex kInternal(
    R"(load_state_dict|read_file|write_file_atomic|Sequential|SGD:|\.[0-9]*00000000[0-9])");

TEST(CliMessages, ValuesAreEchoedAsTyped) {
  TempDir dir;
  const std::string ck = dir / "ck";
  ASSERT_EQ(
      lockstep({"train", "--epochs", "1", "--momentum", "0.9", "--checkpoint-dir", ck}).status, 0);
  std::string line = expect_error(
      {"train", "--epochs", "2", "--momentum", "0.8", "--checkpoint-dir", ck, "--resume"},
      {"--momentum=0.8 but the checkpoint has --momentum=0.9"});
  EXPECT_FALSE(std::regex_search(line, kInternal)) << line;
  line = expect_error({"train", "--nesterov", "--momentum", "0.9", "--dampening", "0.3"},
                      {"--nesterov", "--momentum 0.9 --dampening 0.3"});
  EXPECT_FALSE(std::regex_search(line, kInternal)) << line;
}

TEST(CliMessages, NoInternalFunctionNames) {
  TempDir dir;
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--save", dir / "w"}).status, 0);
  write_text(dir / "garbage", "not safetensors");
  const std::vector<std::vector<std::string>> cases{
      {"train", "--init", dir / "w", "--model", "mlp:10,6,2"},
      {"eval", "--weights", dir / "w", "--model", "mlp:10,5,5,2"},
      {"train", "--init", dir / "missing"},
      {"eval", "--weights", dir.path().string()},
      {"train", "--init", dir / "garbage"},
      {"train", "--save", dir / "no/dir/w"},
  };
  for (const auto& args : cases) {
    const std::string line = expect_error(args);
    EXPECT_FALSE(std::regex_search(line, kInternal)) << line;
  }
}

// A checkpoint given to --init or --weights is named as one, with the way to use it.
TEST(CliMessages, ACheckpointWhereWeightsAreExpectedSaysSo) {
  TempDir dir;
  const std::string ck = dir / "ck";
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--checkpoint-dir", ck}).status, 0);
  const std::string file = ck + "/epoch-0001.safetensors";
  expect_error({"train", "--init", file}, {"--init " + file, "is a training checkpoint",
                                           "--checkpoint-dir " + ck + " --resume"});
  expect_error({"eval", "--weights", file}, {"--weights " + file, "is a training checkpoint"});
}

/// Runs `lockstep args` with stdout on a pseudo-terminal `columns` wide; returns what it drew.
std::string run_on_terminal(const std::vector<std::string>& args, int columns) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  EXPECT_GE(master, 0);
  EXPECT_EQ(::grantpt(master), 0);
  EXPECT_EQ(::unlockpt(master), 0);
  const std::string slave = ::ptsname(master);
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = static_cast<unsigned short>(columns);
  EXPECT_EQ(::ioctl(master, TIOCSWINSZ, &ws), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, slave.c_str(), O_RDWR | O_NOCTTY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclose(&actions, master);
  const pid_t pid = spawn_cli(args, actions);
  std::string drawn;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) drawn.append(buf, n);  // EIO at end
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ::close(master);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  return drawn;
}

// Every redraw of the bar (a piece between carriage returns holding "loss") fits in the
// terminal's width minus one column; a wide terminal still gets a bar.
TEST(CliMessages, ProgressBarFitsTheTerminalWidth) {
  for (const int columns : {40, 70, 120}) {
    SCOPED_TRACE(columns);
    const std::string drawn = run_on_terminal({"train", "--epochs", "2"}, columns);
    int bars = 0;
    bool with_bar = false;
    std::string piece;
    std::istringstream in(std::regex_replace(drawn, std::regex("\x1b\\[K"), ""));
    while (std::getline(in, piece, '\r')) {
      if (piece.find(" loss ") == std::string::npos) continue;
      ++bars;
      with_bar = with_bar || piece.find('[') != std::string::npos;
      EXPECT_LT(piece.size(), static_cast<std::size_t>(columns)) << "'" << piece << "'";
    }
    EXPECT_GE(bars, 2);
    if (columns >= 70) EXPECT_TRUE(with_bar);
  }
}

}  // namespace
}  // namespace lockstep::e2e
