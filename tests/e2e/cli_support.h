// Helpers of the end-to-end CLI tests: run the built `lockstep` binary (LOCKSTEP_BINARY_DIR) as a
// user would, with stdout/stderr captured, in a per-test temporary directory.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace lockstep::e2e {

namespace fs = std::filesystem;

inline const std::string kCli = std::string(LOCKSTEP_BINARY_DIR) + "/lockstep";
inline const std::string kExample =
    std::string(LOCKSTEP_BINARY_DIR) + "/examples/reference_classifier";

struct RunResult {
  int status = -1;  // exit status, or 128 + signal number when killed by a signal
  std::string out, err;
};

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// `line` without what depends on the clock: the summary's wall time (", 0.1 s,") and an epoch
/// line's "samples/s N", so two runs' lines compare equal when their numbers do.
inline std::string without_timing(const std::string& line) {
  static const std::regex seconds(R"(, [0-9]+(\.[0-9]+)? s,)"), rate(R"( samples/s [0-9.]+)");
  return std::regex_replace(std::regex_replace(line, seconds, ", _ s,"), rate, " samples/s _");
}

/// A fresh directory for the current test, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(::testing::TempDir()) / ("lockstep_e2e_" + std::to_string(::getpid()) + "_" +
                                              info->test_suite_name() + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  /// path()/name as a string.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  /// Names of the entries of path() (not recursive), sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

/// A started child process with stdout/stderr going to files.
class Child {
 public:
  Child(const std::string& program, const std::vector<std::string>& args) {
    static int counter = 0;
    io_dir_ = fs::path(::testing::TempDir()) /
              ("lockstep_e2e_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(io_dir_);
    out_path_ = (io_dir_ / "stdout").string();
    err_path_ = (io_dir_ / "stderr").string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<std::string> argv_strings{program};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      ADD_FAILURE() << "cannot start " << program << ": " << std::strerror(rc);
      pid_ = -1;
    }
  }
  ~Child() {
    if (pid_ > 0) {
      if (ended_status_ < 0) ::kill(pid_, SIGKILL);  // not a pid already reaped
      wait();
    }
    std::error_code ec;
    fs::remove_all(io_dir_, ec);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  /// What the child has written to stdout so far.
  std::string out_so_far() const { return read_text(out_path_); }
  /// Waits up to `limit` for the child to end: true (then wait() returns at once) or false.
  bool ended_within(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      int wstatus = 0;
      if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
        ended_status_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return ended_status_ >= 0;
  }
  /// Waits for the child to end and returns its result.
  RunResult wait() {
    RunResult r;
    if (ended_status_ >= 0) {
      r.status = ended_status_;
      pid_ = -1;
    } else if (pid_ > 0) {
      int wstatus = 0;
      ::waitpid(pid_, &wstatus, 0);
      r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
      pid_ = -1;
    }
    r.out = read_text(out_path_);
    r.err = read_text(err_path_);
    return r;
  }

 private:
  pid_t pid_ = -1;
  int ended_status_ = -1;  // set by ended_within()
  fs::path io_dir_;
  std::string out_path_, err_path_;
};

/// Starts `lockstep args...` with the file `actions` given (which it destroys); returns the pid,
/// or -1 (a test failure) when it cannot start.
inline pid_t spawn_cli(const std::vector<std::string>& args, posix_spawn_file_actions_t& actions) {
  std::vector<std::string> all{kCli};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, kCli.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << kCli << ": " << std::strerror(rc);
  return rc == 0 ? pid : -1;
}

/// Runs `program args...` to completion (stdin /dev/null, no shell).
inline RunResult run(const std::string& program, const std::vector<std::string>& args) {
  Child child(program, args);
  return child.wait();
}

inline RunResult lockstep(const std::vector<std::string>& args) { return run(kCli, args); }

/// Built with ASan or TSan, whose shadow memory reserves terabytes of address space: a test that
/// runs the CLI under `ulimit -v` (with_ulimit_v) skips there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/// /bin/sh's arguments that run `command` (a program, then its arguments) under `ulimit -v kib`
/// (KiB of address space): run("/bin/sh", with_ulimit_v(kib, {kCli, "train", ...})).
inline std::vector<std::string> with_ulimit_v(long kib, const std::vector<std::string>& command) {
  std::vector<std::string> sh{"-c", "ulimit -v " + std::to_string(kib) + " && exec \"$0\" \"$@\""};
  sh.insert(sh.end(), command.begin(), command.end());
  return sh;
}

/// `lockstep args` under `ulimit -v kib` (KiB of address space).
inline RunResult lockstep_limited(long kib, const std::vector<std::string>& args) {
  std::vector<std::string> command{kCli};
  command.insert(command.end(), args.begin(), args.end());
  return run("/bin/sh", with_ulimit_v(kib, command));
}

inline std::string command_text(const std::vector<std::string>& args) {
  std::string cmd = "lockstep";
  for (const auto& a : args) cmd += " " + a;
  return cmd;
}

/// Asserts a usage/data error: exit `status` (2 by default), exactly one `lockstep: error:` line
/// on stderr that contains every string of `mentions`; returns that line.
inline std::string expect_error(const std::vector<std::string>& args,
                                const std::vector<std::string>& mentions = {}, int status = 2) {
  SCOPED_TRACE(command_text(args));
  RunResult r = lockstep(args);
  EXPECT_EQ(r.status, status) << r.err;
  auto lines = lines_of(r.err);
  EXPECT_EQ(lines.size(), 1u) << r.err;
  if (lines.empty()) return "";
  EXPECT_EQ(lines[0].rfind("lockstep: error: ", 0), 0u) << lines[0];
  for (const std::string& m : mentions)
    EXPECT_NE(lines[0].find(m), std::string::npos) << "'" << m << "' missing in: " << lines[0];
  return lines[0];
}

/// Asserts exit 2, nothing on stdout and one `lockstep: error:` line (a command-line error).
inline void expect_usage_error(const std::vector<std::string>& args,
                               const std::vector<std::string>& mentions = {}) {
  SCOPED_TRACE(command_text(args));
  RunResult r = lockstep(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("lockstep: error: ", 0), 0u) << lines[0];
  for (const std::string& m : mentions)
    EXPECT_NE(lines[0].find(m), std::string::npos) << "'" << m << "' missing in: " << lines[0];
}

// ---- IDX fixtures (tiny MNIST-layout files written by the tests) -----------------------

/// Big-endian 32-bit.
inline std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

/// An IDX images file: magic 0x00000803, n x rows x cols unsigned bytes (pixel = (i*7+j) % 256).
inline std::string idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  std::string s = be32(0x00000803) + be32(n) + be32(rows) + be32(cols);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t j = 0; j < rows * cols; ++j) s += static_cast<char>((i * 7 + j * 13) % 256);
  return s;
}

/// An IDX labels file: magic 0x00000801 and the labels as unsigned bytes.
inline std::string idx_labels(const std::vector<int>& labels) {
  std::string s = be32(0x00000801) + be32(static_cast<std::uint32_t>(labels.size()));
  for (int l : labels) s += static_cast<char>(l);
  return s;
}

inline std::vector<int> cyclic_labels(int n, int classes) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i % classes);
  return v;
}

/// `args` followed by `more`.
inline std::vector<std::string> operator+(std::vector<std::string> args,
                                          const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace lockstep::e2e
