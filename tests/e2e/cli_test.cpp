// End-to-end tests of the `lockstep` CLI: the binary is run as a user would run it (found at
// LOCKSTEP_BINARY_DIR/lockstep) and its stdout, stderr and exit status are checked against the
// conventions in app/cli.h: 0 success, 1 job failed, 2 bad command line with exactly one
// `lockstep: error: ...` line on stderr.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

const std::string kCli = std::string(LOCKSTEP_BINARY_DIR) + "/lockstep";
const std::string kExample = std::string(LOCKSTEP_BINARY_DIR) + "/examples/reference_classifier";

struct RunResult {
  int status = -1;  // exit status, or 128 + signal number when killed by a signal
  std::string out, err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// Runs `program args...` with stdin from /dev/null and stdout/stderr captured in temp files (no
/// shell, so no quoting issues).
RunResult run(const std::string& program, const std::vector<std::string>& args) {
  fs::path dir = fs::path(::testing::TempDir()) /
                 ("lockstep_e2e_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir);
  const std::string out_path = (dir / "stdout").string(), err_path = (dir / "stderr").string();

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<std::string> argv_strings{program};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  RunResult result;
  pid_t pid = 0;
  int rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << program << ": " << std::strerror(rc);
    return result;
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  result.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  fs::remove_all(dir);
  return result;
}

RunResult lockstep(const std::vector<std::string>& args) { return run(kCli, args); }

/// Asserts the run printed `epochs` lines `Epoch k, Validation Loss: x.xxxx`, k = 1..epochs.
void expect_epoch_lines(const RunResult& r, int epochs) {
  static const std::regex line_re(R"(^Epoch (\d+), Validation Loss: \d+\.\d{4}$)");
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(epochs)) << r.out;
  for (int k = 1; k <= epochs; ++k) {
    std::smatch m;
    const std::string& line = lines[static_cast<std::size_t>(k - 1)];
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "line " << k << ": " << line;
    EXPECT_EQ(m[1].str(), std::to_string(k));
  }
}

/// Asserts a usage error: exit 2, nothing on stdout, exactly one `lockstep: error:` stderr line.
void expect_usage_error(const std::vector<std::string>& args) {
  std::string cmd = "lockstep";
  for (const auto& a : args) cmd += " " + a;
  SCOPED_TRACE(cmd);
  RunResult r = lockstep(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("lockstep: error: ", 0), 0u) << lines[0];
}

TEST(Cli, TrainWithoutArgumentsRunsTheReferenceWorkload) {
  RunResult r = lockstep({"train"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  expect_epoch_lines(r, 10);
}

TEST(Cli, TrainIsDeterministic) {
  RunResult a = lockstep({"train"}), b = lockstep({"train"});
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(Cli, TrainPrintsWhatTheReferenceExamplePrints) {
  if (!fs::exists(kExample)) GTEST_SKIP() << kExample << " not built (LOCKSTEP_BUILD_EXAMPLES=OFF)";
  RunResult cli = lockstep({"train"}), example = run(kExample, {});
  ASSERT_EQ(example.status, 0) << example.err;
  ASSERT_EQ(cli.status, 0) << cli.err;
  EXPECT_EQ(cli.out, example.out);
}

TEST(Cli, EpochsFlagSetsTheNumberOfLines) {
  RunResult r = lockstep({"train", "--epochs", "2"});
  EXPECT_EQ(r.status, 0) << r.err;
  expect_epoch_lines(r, 2);
  // The first epochs are the same as in the default run: --epochs only stops earlier.
  RunResult full = lockstep({"train"});
  EXPECT_EQ(full.out.rfind(r.out, 0), 0u);
}

TEST(Cli, FlagsChangeTheRun) {
  RunResult base = lockstep({"train", "--epochs", "1"});
  ASSERT_EQ(base.status, 0) << base.err;
  for (std::vector<std::string> flag :
       {std::vector<std::string>{"--seed", "1"}, {"--lr", "0.1"}, {"--batch-size", "800"}}) {
    std::vector<std::string> args{"train", "--epochs", "1"};
    args.insert(args.end(), flag.begin(), flag.end());
    RunResult r = lockstep(args);
    EXPECT_EQ(r.status, 0) << flag[0] << ": " << r.err;
    expect_epoch_lines(r, 1);
    EXPECT_NE(r.out, base.out) << flag[0] << " " << flag[1] << " made no difference";
  }
}

TEST(Cli, UnknownFlagIsAUsageError) { expect_usage_error({"train", "--no-such-flag"}); }

TEST(Cli, BadValuesAreUsageErrors) {
  expect_usage_error({"train", "--batch-size", "0"});
  expect_usage_error({"train", "--lr", "-1"});
  expect_usage_error({"train", "--lr", "nan"});
  expect_usage_error({"train", "--epochs", "0"});
  expect_usage_error({"train", "--epochs", "two"});
  expect_usage_error({"train", "--seed", "-1"});
  expect_usage_error({"train", "--epochs"});
}

TEST(Cli, MissingOrUnknownCommandIsAUsageError) {
  expect_usage_error({});
  expect_usage_error({"no-such-command"});
}

TEST(Cli, VersionNamesTheVersionAndBackends) {
  RunResult r = lockstep({"--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(LOCKSTEP_VERSION), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backends: cpu"), std::string::npos) << r.out;
}

TEST(Cli, HelpDocumentsEveryFlagWithItsDefault) {
  RunResult top = lockstep({"--help"});
  EXPECT_EQ(top.status, 0) << top.err;
  EXPECT_NE(top.out.find("train"), std::string::npos) << top.out;
  RunResult r = lockstep({"train", "--help"});
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* expected : {"--epochs", "(default: 10)", "--batch-size", "(default: 32)",
                               "--lr", "(default: 0.01)", "--seed", "(default: 0)"})
    EXPECT_NE(r.out.find(expected), std::string::npos) << "missing " << expected << "\n" << r.out;
}

}  // namespace
