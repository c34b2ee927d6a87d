#include "lockstep/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <random>

#include "lockstep/core/error.h"

namespace lockstep::io {
namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

[[noreturn]] void throw_errno(const std::string& what, int err) {
  throw IoError(what + ": " + std::strerror(err));
}

/// The directory holding `path` ("." for a bare file name, "/" for "/name").
std::string parent_directory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

/// A name no other writer (thread or process) picks: pid, a per-process counter and 64 random
/// bits. O_EXCL makes a clash an error rather than a shared file.
std::string temporary_name(const std::string& path) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng(
      std::random_device{}() ^
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp-%ld-%llx%llx", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(rng()));
  return path + suffix;
}

/// Closes `fd` once; errors from an explicit close() are reported by the caller.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  /// close(2)'s errno, or 0.
  int close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace

std::string write_target(const std::string& path) {
  std::string target = path;
  for (int links = 0;; ++links) {
    struct stat st {};
    if (::lstat(target.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return target;
    if (links == 40) throw_errno(quoted(path) + ": cannot follow its symbolic links", ELOOP);
    std::string next(static_cast<std::size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(target.c_str(), next.data(), next.size());
    if (n < 0) throw_errno(quoted(path) + ": cannot read symbolic link " + quoted(target), errno);
    next.resize(static_cast<std::size_t>(n));
    // A relative link is relative to the directory that holds it.
    const std::string dir = parent_directory(target);
    target = next.front() == '/' || dir == "." ? next : dir + "/" + next;
  }
}

std::string non_regular_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  return "not a regular file";
}

bool is_temporary_file(const std::string& filename) {
  return filename.find(".tmp-") != std::string::npos;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  if (path.empty()) throw IoError("cannot write a file: empty path");
  const std::string target = write_target(path);
  const std::string where = "cannot write " + quoted(path) +
                            (target == path ? "" : " (a link to " + quoted(target) + ")");
  if (const std::string kind = non_regular_kind(target); !kind.empty())
    throw IoError(where + ": it is " + kind +
                  "; only a regular file is replaced (nothing was written)");
  const std::string tmp = temporary_name(target);
  FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd.get() < 0) throw_errno(where + ": cannot create temporary file " + quoted(tmp), errno);
  // From here on every failure removes the temporary before throwing.
  auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    throw_errno(where + ": " + what, err);
  };
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd.get(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write temporary file " + quoted(tmp), errno);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail("cannot fsync temporary file " + quoted(tmp), errno);
  if (const int err = fd.close(); err != 0) fail("cannot close temporary file " + quoted(tmp), err);
  if (::rename(tmp.c_str(), target.c_str()) != 0)
    fail("cannot rename " + quoted(tmp) + " over it", errno);

  const std::string dir = parent_directory(target);
  FileDescriptor dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.get() < 0) throw_errno(where + ": cannot open directory " + quoted(dir), errno);
  if (::fsync(dfd.get()) != 0 && errno != EINVAL && errno != ENOTSUP)
    throw_errno(where + ": cannot fsync directory " + quoted(dir), errno);
}

namespace {

std::atomic<std::uint64_t> read_limit{UINT64_MAX};
std::mutex read_limit_mutex;
std::string read_limit_why;  // guarded by read_limit_mutex

/// "123 bytes", or "64.0 GiB (68719476736 bytes)".
std::string size_text(std::uint64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes);
  int u = -1;
  while (v >= 1024.0 && u < 5) v /= 1024.0, ++u;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f %s (%llu bytes)", v, units[u],
                static_cast<unsigned long long>(bytes));
  return buf;
}

[[noreturn]] void throw_too_large(const std::string& where, const std::string& size,
                                  std::uint64_t limit) {
  std::string why;
  {
    const std::lock_guard<std::mutex> lock(read_limit_mutex);
    why = read_limit_why;
  }
  throw IoError(where + ": " + size + ", more than the " + size_text(limit) + " that may be read" +
                (why.empty() ? "" : " (" + why + ")"));
}

}  // namespace

void set_read_limit(std::uint64_t bytes, const std::string& why) {
  const std::lock_guard<std::mutex> lock(read_limit_mutex);
  read_limit_why = why;
  read_limit = bytes;
}

std::string read_file(const std::string& path) {
  const std::string where = quoted(path);
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw_errno(where + ": cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno(where + ": cannot stat", errno);
  if (S_ISDIR(st.st_mode)) throw_errno(where + ": cannot read", EISDIR);
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
    throw IoError(where + ": is a " +
                  (S_ISCHR(st.st_mode) ? "character" : "block") +
                  " device, not a file (give a regular file, or a pipe)");
  const std::uint64_t limit = read_limit.load();
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > limit)
    throw_too_large(where, "is " + size_text(static_cast<std::uint64_t>(st.st_size)), limit);
  std::string out;
  if (S_ISREG(st.st_mode) && st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(where + ": cannot read", errno);
    }
    if (n == 0) break;
    if (out.size() + static_cast<std::size_t>(n) > limit)
      throw_too_large(where, "holds more", limit);
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace lockstep::io
