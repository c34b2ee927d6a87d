// Whole-file reads and crash-safe whole-file writes (POSIX). A reader of `path` sees either the
// old contents or the new ones, never a partial file: the bytes go to a temporary file in the
// same directory, which is flushed, fsynced and then renamed over `path` (rename(2) is atomic
// within one file system), and the directory is fsynced so that the rename itself is durable.
//
// Only a regular file (or nothing) is ever replaced. A symbolic link is followed to the end of
// its chain, and the file there is what gets written (the temporary lies beside it, the link
// stays a link); that file need not exist yet (a dangling link). A device, FIFO, socket or
// directory at the end of the chain is refused (IoError), not replaced and not written through:
// a rename over `/dev/full` would replace the device node, and a reader of a FIFO would get
// nothing. (torch.save writes through such paths; Lockstep's outputs are regular files only.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep::io {

/// The file a write to `path` lands on: `path` itself, or when `path` is a symbolic link the end
/// of its chain of links (a relative link resolved against the directory holding it), which
/// need not exist. IoError naming `path` for a chain of more than 40 links (a loop).
std::string write_target(const std::string& path);

/// What lies at `path` (not following a final symbolic link) when it is neither a regular file
/// nor absent: "a directory", "a character device", "a block device", "a FIFO", "a socket",
/// "a symbolic link"; empty for a regular file or nothing.
std::string non_regular_kind(const std::string& path);

/// Writes `bytes` to write_target(`path`) atomically: writes `TARGET.tmp-<pid>-<random>` in the
/// target's directory
/// (created with O_EXCL, mode 0666 minus the umask), flushes and fsyncs it, renames it over
/// the target, then fsyncs the directory. IoError naming `path` when the target is not a regular
/// file or nothing (non_regular_kind), before anything is written. On any failure before the
/// rename the temporary is removed, the target is untouched, and IoError (naming the path and
/// strerror) is thrown. A failed
/// directory fsync after the rename (other than "not supported" on that file system) also
/// throws IoError; `path` then already holds the new contents.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// True for names write_file_atomic uses for its temporaries (they contain ".tmp-"). Takes a
/// file name or a path; a directory scan (e.g. `--resume` looking for checkpoints) skips these.
bool is_temporary_file(const std::string& filename);

/// The whole file as bytes. IoError naming the path and the system's reason when it cannot be
/// opened or read, or when it is a directory; IoError too, before anything is read, when it is a
/// character or block device (/dev/zero, /dev/urandom: no file has an end there) or a regular
/// file larger than the read limit (set_read_limit), and when a pipe or socket passes the limit.
std::string read_file(const std::string& path);

/// The most bytes one read_file may return, and why (for its message, e.g. "the memory this
/// process may use (MemAvailable)"). Unlimited until set; the `lockstep` CLI sets it at start.
void set_read_limit(std::uint64_t bytes, const std::string& why);

}  // namespace lockstep::io
