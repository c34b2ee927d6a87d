// The --checkpoint-dir lock (see checkpoint_dir_lock.h).
#include "guards/checkpoint_dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "files/checkpoint.h"
#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"

namespace lockstep::app {
namespace {

namespace fs = std::filesystem;

/// Whether process `pid` exists (on this machine).
bool process_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

}  // namespace

long temporary_writer_pid(const std::string& filename) {
  const auto at = filename.rfind(".tmp-");
  if (at == std::string::npos) return -1;
  const char* start = filename.c_str() + at + 5;
  char* end = nullptr;
  const long pid = std::strtol(start, &end, 10);
  return end != start && *end == '-' && pid > 0 ? pid : -1;
}

CheckpointDirLock::CheckpointDirLock(const std::string& dir, bool resume) {
  std::error_code created;
  fs::create_directories(io::write_target(dir), created);  // a dangling link's target too
  if (created) throw IoError("--checkpoint-dir " + dir + ": cannot create: " + created.message());
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw IoError("--checkpoint-dir " + dir + ": cannot open: " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw IoError("--checkpoint-dir " + dir +
                    " is in use by another lockstep run (it holds the directory's lock); wait "
                    "for it to end, or give another directory");
    throw IoError("--checkpoint-dir " + dir + ": cannot lock: " + std::strerror(err));
  }
  try {
    if (!resume)
      if (const std::optional<std::string> newest = find_latest_checkpoint(dir))
        throw ValueError("--checkpoint-dir " + dir + " already holds checkpoints of another run (" +
                         fs::path(*newest).filename().string() +
                         "): continue that run with --resume, or give a new directory");
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!io::is_temporary_file(name)) continue;
      const long pid = temporary_writer_pid(name);
      if (pid > 0 && !process_alive(pid)) fs::remove(it->path(), ec);
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace lockstep::app
