// The output paths of `lockstep train` (see output_paths.h).
#include "output_paths.h"

#include <filesystem>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"

namespace lockstep::app {
namespace {

namespace fs = std::filesystem;

/// write_target(path), with an IoError (a loop of links) prefixed by the flag.
std::string target_of(const std::string& flag, const std::string& path) {
  try {
    return io::write_target(path);
  } catch (const IoError& e) {
    throw IoError(flag + " " + e.what());
  }
}

}  // namespace

void check_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  const std::string target = target_of(flag, path);
  const std::string shown = flag + " " + path + (target == path ? "" : " (a link to " + target + ")");
  const std::string kind = io::non_regular_kind(target);
  if (kind == "a directory") throw IoError(shown + ": is a directory");
  if (!kind.empty())
    throw IoError(shown + ": is " + kind +
                  "; lockstep writes its outputs as regular files (replaced atomically), never "
                  "through a device, FIFO or socket: give a file path");
  std::error_code ec;
  const fs::path p(target);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw IoError(shown + ": directory " + dir.string() + " does not exist");
}

void check_output_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw IoError(flag + " " + dir + ": not a directory");
}

}  // namespace lockstep::app
