// End-to-end tests of what `lockstep train` does with the paths it writes (--save, --metrics,
// --checkpoint-dir), found by trying, as root, to make a run lose its work or damage files
// outside it (issue 23): a rename replaced the device node /dev/full, a symbolic link instead of
// its target, a FIFO whose reader got nothing.
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::e2e {
namespace {

/// A FIFO, a socket and (where mknod is allowed: root with CAP_MKNOD) a device node like
/// /dev/full in `dir`: (path, what the error calls it).
std::vector<std::pair<std::string, std::string>> special_files(const TempDir& dir, int& sock) {
  std::vector<std::pair<std::string, std::string>> nodes;
  EXPECT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  nodes.emplace_back(dir / "fifo", "a FIFO");
  sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = dir / "sock";
  if (sock >= 0 && sock_path.size() < sizeof addr.sun_path) {
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path.c_str());
    if (::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
      nodes.emplace_back(sock_path, "a socket");
  }
  if (::mknod((dir / "full").c_str(), S_IFCHR | 0600, ::makedev(1, 7)) == 0)
    nodes.emplace_back(dir / "full", "a character device");
  else
    std::printf("[ NOTE ] mknod: %s; the device-node case is not checked here\n",
                std::strerror(errno));
  return nodes;
}

// A device, FIFO or socket given as --save or --metrics (directly or through a link) is refused
// before training: exit 2 naming the flag, the path and what is there; nothing is printed on
// stdout (no epoch trained) and the node is still what it was.
TEST(CliOutputs, DeviceFifoAndSocketAreRefusedBeforeTraining) {
  TempDir dir;
  int sock = -1;
  auto nodes = special_files(dir, sock);
  fs::create_symlink(dir / "fifo", dir / "link-to-fifo");
  nodes.emplace_back(dir / "link-to-fifo", "a FIFO");
  for (const auto& [path, kind] : nodes)
    for (const std::string flag : {"--save", "--metrics"}) {
      const auto before = fs::symlink_status(path).type();
      expect_usage_error({"train", "--epochs", "1", flag, path}, {flag, path, "is " + kind});
      EXPECT_EQ(fs::symlink_status(path).type(), before) << path;
    }
  if (sock >= 0) ::close(sock);
}

// --save and --metrics through a symbolic link write the link's target (also one that does not
// exist yet); the links stay links. A --checkpoint-dir that is a dangling link gets its target
// directory created.
TEST(CliOutputs, SymbolicLinksAreFollowedToTheirTargets) {
  TempDir dir;
  fs::create_directories(dir / "real");
  write_text(dir / "real/old.safetensors", "old");
  fs::create_symlink(dir / "real/old.safetensors", dir / "w");
  fs::create_symlink("real/new.safetensors", dir / "dangling");
  fs::create_symlink("real/metrics.jsonl", dir / "m");
  fs::create_symlink(dir / "real/ck", dir / "ck");
  RunResult r = lockstep({"train", "--epochs", "1", "--save", dir / "w", "--metrics", dir / "m",
                          "--checkpoint-dir", dir / "ck"});
  ASSERT_EQ(r.status, 0) << r.err;
  r = lockstep({"train", "--epochs", "1", "--save", dir / "dangling"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const std::string link : {"w", "dangling", "m", "ck"})
    EXPECT_TRUE(fs::is_symlink(dir / link)) << link;
  EXPECT_NO_THROW(safetensors::load_file(dir / "real/old.safetensors"));
  EXPECT_EQ(read_text(dir / "real/new.safetensors"), read_text(dir / "real/old.safetensors"));
  EXPECT_EQ(lines_of(read_text(dir / "real/metrics.jsonl")).size(), 1u);
  EXPECT_TRUE(fs::exists(dir / "real/ck/epoch-0001.safetensors"));
}

// ---- writable before training, no collisions, a fallback at the end (issue 23, kind 4) ------

/// A tmpfs of `size` mounted on a fresh directory for one test (needs CAP_SYS_ADMIN: root
/// outside a restricted container); `reason()` says why not when mounting failed.
class TinyTmpfs {
 public:
  TinyTmpfs(const TempDir& dir, const std::string& name, const std::string& options)
      : path_(dir / name) {
    fs::create_directories(path_);
    if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) == 0)
      mounted_ = true;
    else
      reason_ = std::string("cannot mount a tmpfs (") + std::strerror(errno) + ")";
  }
  ~TinyTmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& reason() const { return reason_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  /// Remounts it read-only.
  bool make_read_only() const {
    return ::mount("tmpfs", path_.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }
  /// Fills it up with one file.
  void fill() const {
    std::FILE* f = std::fopen((path_ + "/filler").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string block(4096, 'f');
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }

 private:
  std::string path_, reason_;
  bool mounted_ = false;
};

// A read-only or full target of --save, --metrics or --checkpoint-dir was found only after the
// last epoch, and the weights were lost. Now: exit 2 before the first step (nothing on stdout),
// naming the flag and the system's reason; a file system without room for the weights file is
// refused with the estimate.
TEST(CliOutputs, ReadOnlyAndFullTargetsAreRefusedBeforeTraining) {
  TempDir dir;
  TinyTmpfs ro(dir, "ro", "size=256k");
  if (!ro.mounted()) GTEST_SKIP() << ro.reason();
  ASSERT_TRUE(ro.make_read_only());
  for (const std::string flag : {"--save", "--metrics", "--checkpoint-dir"})
    expect_usage_error({"train", "--epochs", "1", flag, ro / "out"},
                       {flag, ro / "out", "Read-only file system", "before training"});
  TinyTmpfs full(dir, "full", "size=64k");
  ASSERT_TRUE(full.mounted()) << full.reason();
  full.fill();
  for (const std::string flag : {"--save", "--metrics", "--checkpoint-dir"})
    expect_usage_error({"train", "--epochs", "1", flag, full / "out"},
                       {flag, "No space left on device"});
  TinyTmpfs small(dir, "small", "size=64k");
  ASSERT_TRUE(small.mounted()) << small.reason();
  // 26,002 float32 parameters: about 102 KiB, more than the 64 KiB there (the check counts
  // the tensors and a header allowance).
  expect_usage_error({"train", "--epochs", "1", "--model", "mlp:10,2000,2", "--save", small / "w"},
                     {"--save", "needs about 10", "has 64.0 KiB free"});
  EXPECT_FALSE(fs::exists(small / "w"));
}

// Outputs that are the same file as another output or as an input are refused before training
// (a --metrics over --init destroyed the initial weights); --save over --init trains in place.
TEST(CliOutputs, CollidingOutputsAreRefusedButSaveMayReplaceInit) {
  TempDir dir;
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--save", dir / "init"}).status, 0);
  const std::string init = read_text(dir / "init");
  write_text(dir / "d.csv", "a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n");
  fs::create_symlink(dir / "init", dir / "init-link");
  expect_usage_error({"train", "--save", dir / "x", "--metrics", dir / "x"},
                     {"--save", "--metrics", "same file"});
  expect_usage_error({"train", "--init", dir / "init", "--metrics", dir / "init-link"},
                     {"--metrics", "--init", "same file"});
  expect_usage_error({"train", "--data", "csv:" + (dir / "d.csv"), "--save", dir / "d.csv"},
                     {"--save", "--data", "same file"});
  expect_usage_error({"train", "--checkpoint-dir", dir / "ck", "--save", dir / "./ck"},
                     {"--save", "--checkpoint-dir"});
  EXPECT_EQ(read_text(dir / "init"), init);
  RunResult r =
      lockstep({"train", "--epochs", "1", "--init", dir / "init", "--save", dir / "init"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(read_text(dir / "init"), init);
  EXPECT_NO_THROW(safetensors::load_file(dir / "init"));
}

// The --save target turns read-only during training (remounted while the run is stopped at
// step 3 by the test hook): the weights go to a fallback file in --checkpoint-dir, which the
// error line names.
TEST(CliOutputs, AFailingFinalWriteLeavesTheWeightsInAFallbackFile) {
  TempDir dir;
  TinyTmpfs target(dir, "mnt", "size=256k");
  if (!target.mounted()) GTEST_SKIP() << target.reason();
  ::setenv("LOCKSTEP_TEST_FAULT", "hang:0:3", 1);
  Child child(kCli, {"train", "--epochs", "2", "--devices", "cpu:0", "--save", target / "w",
                     "--checkpoint-dir", dir / "ck"});
  ::unsetenv("LOCKSTEP_TEST_FAULT");
  const pid_t pid = child.pid();
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child.pid(), &wstatus, WUNTRACED), child.pid());
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  ASSERT_TRUE(target.make_read_only());
  ::kill(child.pid(), SIGCONT);
  RunResult r = child.wait();
  EXPECT_EQ(r.status, 2) << r.err;
  auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  const std::string fallback =
      (dir / "ck") + "/lockstep-save-" + std::to_string(pid) + ".safetensors";
  EXPECT_NE(lines[0].find("--save"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("Read-only file system"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("the trained weights were written to " + fallback), std::string::npos)
      << lines[0];
  EXPECT_NO_THROW(safetensors::load_file(fallback));
}

}  // namespace
}  // namespace lockstep::e2e
