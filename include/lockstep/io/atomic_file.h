// Whole-file reads and crash-safe whole-file writes (POSIX). A reader of `path` sees either the
// old contents or the new ones, never a partial file: the bytes go to a temporary file in the
// same directory, which is flushed, fsynced and then renamed over `path` (rename(2) is atomic
// within one file system), and the directory is fsynced so that the rename itself is durable.
#pragma once

#include <string>
#include <string_view>

namespace lockstep::io {

/// Writes `bytes` to `path` atomically: writes `path.tmp-<pid>-<random>` in the same directory
/// (created with O_EXCL, mode 0666 minus the umask), flushes and fsyncs it, renames it over
/// `path`, then fsyncs the directory. On any failure before the rename the temporary is
/// removed, `path` is untouched, and IoError (naming the path and strerror) is thrown. A failed
/// directory fsync after the rename (other than "not supported" on that file system) also
/// throws IoError; `path` then already holds the new contents.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// True for names write_file_atomic uses for its temporaries (they contain ".tmp-"). Takes a
/// file name or a path; a directory scan (e.g. `--resume` looking for checkpoints) skips these.
bool is_temporary_file(const std::string& filename);

/// The whole file as bytes. IoError naming the path and the system's reason when it cannot be
/// opened or read, or when it is a directory.
std::string read_file(const std::string& path);

}  // namespace lockstep::io
