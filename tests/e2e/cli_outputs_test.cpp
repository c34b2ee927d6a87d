// End-to-end tests of what `lockstep train` does with the paths it writes (--save, --metrics,
// --checkpoint-dir), found by trying, as root, to make a run lose its work or damage files
// outside it (issue 23): a rename replaced the device node /dev/full, a symbolic link instead of
// its target, a FIFO whose reader got nothing.
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

}  // namespace
}  // namespace lockstep::e2e
