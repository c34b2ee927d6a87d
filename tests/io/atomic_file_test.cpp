// io::write_file_atomic / read_file / is_temporary_file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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

// rename(2) over a non-empty directory fails: the temporary is removed, the directory stays.
TEST(AtomicFile, FailedRenameRemovesTemporaryAndKeepsTarget) {
  TempDir dir;
  fs::create_directory(dir.file("target"));
  write_file_atomic(dir.file("target/inside"), "keep");
  const std::string msg = io_error_message([&] { write_file_atomic(dir.file("target"), "x"); });
  EXPECT_NE(msg.find("cannot rename"), std::string::npos) << msg;
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
