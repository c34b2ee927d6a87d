// io::write_file_atomic / read_file / is_temporary_file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/lockstep.h"

namespace fs = std::filesystem;
using lockstep::IoError;
using lockstep::io::is_temporary_file;
using lockstep::io::read_file;
using lockstep::io::write_file_atomic;

namespace {

/// A fresh empty directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "lockstep_io_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class F>
std::string io_error_message(F&& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no IoError thrown";
  return {};
}

}  // namespace

TEST(AtomicFile, WritesAndReadsBackBinaryBytes) {
  TempDir dir;
  const std::string bytes("a\0b\xff\n", 5);
  write_file_atomic(dir.file("x.bin"), bytes);
  EXPECT_EQ(slurp(dir.file("x.bin")), bytes);
  EXPECT_EQ(read_file(dir.file("x.bin")), bytes);
  write_file_atomic(dir.file("empty"), "");
  EXPECT_EQ(read_file(dir.file("empty")), "");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"empty", "x.bin"}));
}

TEST(AtomicFile, ReadsFilesLargerThanOneBuffer) {
  TempDir dir;
  std::string big(300000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  write_file_atomic(dir.file("big"), big);
  EXPECT_EQ(read_file(dir.file("big")), big);
}

TEST(AtomicFile, OverwriteReplacesContentsAndLeavesNoTemporaries) {
  TempDir dir;
  for (int i = 0; i < 5; ++i) write_file_atomic(dir.file("ckpt"), "version " + std::to_string(i));
  EXPECT_EQ(read_file(dir.file("ckpt")), "version 4");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"ckpt"});
}

TEST(AtomicFile, RelativePathInCurrentDirectory) {
  TempDir dir;
  const auto old = fs::current_path();
  fs::current_path(dir.path());
  write_file_atomic("rel.txt", "hi");
  fs::current_path(old);
  EXPECT_EQ(read_file(dir.file("rel.txt")), "hi");
}

TEST(AtomicFile, MissingDirectoryThrowsIoErrorNamingPath) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/out.safetensors");
  const std::string msg = io_error_message([&] { write_file_atomic(path, "x"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  EXPECT_TRUE(dir.names().empty());
}

TEST(AtomicFile, UnwritableDirectoryThrowsAndKeepsOriginal) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not stop root";
  TempDir dir;
  write_file_atomic(dir.file("model.safetensors"), "original");
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string msg =
      io_error_message([&] { write_file_atomic(dir.file("model.safetensors"), "new"); });
  fs::permissions(dir.path(), fs::perms::owner_all, fs::perm_options::add);
  EXPECT_NE(msg.find(dir.file("model.safetensors")), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  EXPECT_EQ(read_file(dir.file("model.safetensors")), "original");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"model.safetensors"});
}

// A write that fails half way (here: the file size limit, which also binds root) removes the
// temporary and leaves the original file as it was.
TEST(AtomicFile, FailedWriteRemovesTemporaryAndKeepsOriginal) {
  TempDir dir;
  write_file_atomic(dir.file("model.safetensors"), "original");
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 16;
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string msg = io_error_message(
      [&] { write_file_atomic(dir.file("model.safetensors"), std::string(4096, 'n')); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find(dir.file("model.safetensors")), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(read_file(dir.file("model.safetensors")), "original");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"model.safetensors"});
}

// A directory is never replaced (rename(2) would replace an empty one): refused before any
// temporary is created, the directory stays.
TEST(AtomicFile, DirectoryIsRefusedAndKept) {
  TempDir dir;
  fs::create_directory(dir.file("target"));
  write_file_atomic(dir.file("target/inside"), "keep");
  fs::create_directory(dir.file("empty"));
  const std::string msg = io_error_message([&] { write_file_atomic(dir.file("target"), "x"); });
  EXPECT_NE(msg.find("it is a directory"), std::string::npos) << msg;
  io_error_message([&] { write_file_atomic(dir.file("empty"), "x"); });
  EXPECT_TRUE(fs::is_directory(dir.file("empty")));
  fs::remove(dir.file("empty"));
  EXPECT_EQ(dir.names(), std::vector<std::string>{"target"});
  EXPECT_EQ(read_file(dir.file("target/inside")), "keep");
}

TEST(AtomicFile, ReadMissingFileThrowsIoError) {
  TempDir dir;
  const std::string path = dir.file("missing.safetensors");
  const std::string msg = io_error_message([&] { read_file(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(AtomicFile, ReadDirectoryThrowsIoError) {
  TempDir dir;
  const std::string msg = io_error_message([&] { read_file(dir.path().string()); });
  EXPECT_NE(msg.find(dir.path().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("Is a directory"), std::string::npos) << msg;
}

TEST(AtomicFile, IsTemporaryFile) {
  TempDir dir;
  EXPECT_TRUE(is_temporary_file("epoch-0003.safetensors.tmp-123-abc"));
  EXPECT_TRUE(is_temporary_file("/ckpt/epoch-0003.safetensors.tmp-1-2"));
  EXPECT_FALSE(is_temporary_file("epoch-0003.safetensors"));
  EXPECT_FALSE(is_temporary_file("tmp-file"));
  EXPECT_FALSE(is_temporary_file("a.tmp"));
}

// Writers racing on one path: every read sees one writer's complete contents, and no
// temporaries are left behind.
TEST(AtomicFile, ConcurrentWritersNeverExposePartialFiles) {
  TempDir dir;
  const std::string path = dir.file("shared");
  const std::string a(20000, 'a'), b(30000, 'b');
  write_file_atomic(path, a);
  std::atomic<bool> done{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < 20; ++i) write_file_atomic(path, w == 0 ? a : b);
    });
  std::thread reader([&] {
    while (!done.load()) {
      const std::string got = read_file(path);
      ASSERT_TRUE(got == a || got == b) << "partial file of " << got.size() << " bytes";
    }
  });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(dir.names(), std::vector<std::string>{"shared"});
}

// ---- what lies at the path (issue 23): only a regular file or nothing is replaced ----------

// A link is followed: the file it points to gets the bytes, the temporary lies beside that
// file, and the link stays a link. Relative links resolve against the link's own directory.
TEST(AtomicFile, WritesThroughSymbolicLinksBesideTheTarget) {
  TempDir dir;
  fs::create_directory(dir.file("a"));
  fs::create_directory(dir.file("b"));
  write_file_atomic(dir.file("b/model"), "old");
  fs::create_symlink("../b/model", dir.file("a/link"));
  fs::create_symlink("a/link", dir.file("chain"));
  write_file_atomic(dir.file("chain"), "new");
  EXPECT_TRUE(fs::is_symlink(dir.file("a/link")));
  EXPECT_TRUE(fs::is_symlink(dir.file("chain")));
  EXPECT_EQ(read_file(dir.file("b/model")), "new");
  EXPECT_EQ(lockstep::io::write_target(dir.file("chain")), dir.file("a/../b/model"));
  std::vector<std::string> in_b;
  for (const auto& e : fs::directory_iterator(dir.file("b"))) in_b.push_back(e.path().filename());
  EXPECT_EQ(in_b, std::vector<std::string>{"model"});
}

// A link whose target does not exist yet: the target is created, the link kept.
TEST(AtomicFile, DanglingLinkCreatesItsTarget) {
  TempDir dir;
  fs::create_symlink(dir.file("later.safetensors"), dir.file("link"));
  write_file_atomic(dir.file("link"), "bytes");
  EXPECT_TRUE(fs::is_symlink(dir.file("link")));
  EXPECT_EQ(read_file(dir.file("later.safetensors")), "bytes");
}

TEST(AtomicFile, LinkLoopIsAnIoError) {
  TempDir dir;
  fs::create_symlink("y", dir.file("x"));
  fs::create_symlink("x", dir.file("y"));
  const std::string msg = io_error_message([&] { write_file_atomic(dir.file("x"), "z"); });
  EXPECT_NE(msg.find(dir.file("x")), std::string::npos) << msg;
  EXPECT_NE(msg.find("symbolic links"), std::string::npos) << msg;
}

// A device node, a FIFO and a socket are refused before anything is written, and stay what
// they were (a rename replaced /dev/full with a regular file; a FIFO's reader got nothing).
TEST(AtomicFile, DeviceFifoAndSocketAreRefusedAndKept) {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> nodes;  // name, expected kind
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  nodes.emplace_back("fifo", "a FIFO");
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = dir.file("sock");
  if (sock_path.size() < sizeof addr.sun_path) {
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path.c_str());
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    nodes.emplace_back("sock", "a socket");
  }
  // The same device as /dev/full (char 1,7); mknod needs CAP_MKNOD (root, outside some
  // containers): skipped there, the FIFO and socket still checked.
  if (::mknod(dir.file("full").c_str(), S_IFCHR | 0600, ::makedev(1, 7)) == 0)
    nodes.emplace_back("full", "a character device");
  else
    std::printf("[ NOTE ] mknod: %s; the device-node case is not checked here\n",
                std::strerror(errno));
  fs::create_symlink("fifo", dir.file("to_fifo"));
  nodes.emplace_back("to_fifo", "a FIFO");
  for (const auto& [name, kind] : nodes) {
    SCOPED_TRACE(name);
    const auto before = fs::symlink_status(dir.file(name)).type();
    const std::string msg = io_error_message([&] { write_file_atomic(dir.file(name), "x"); });
    EXPECT_NE(msg.find(dir.file(name)), std::string::npos) << msg;
    EXPECT_NE(msg.find("it is " + kind), std::string::npos) << msg;
    EXPECT_EQ(fs::symlink_status(dir.file(name)).type(), before);
  }
  ::close(sock);
  for (const auto& n : dir.names()) EXPECT_FALSE(is_temporary_file(n)) << n;
}
