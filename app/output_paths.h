// The files `lockstep train` writes (--save, --metrics, the checkpoints of --checkpoint-dir) and
// what is refused before training so that a run never ends by losing its work or damaging a
// file it was not meant to replace (issue 23):
// - outputs are regular files, replaced atomically (io::write_file_atomic); a symbolic link is
//   followed to its target (also one that does not exist yet), and a device, FIFO or socket is
//   refused (exit 2, naming the path) rather than written through or replaced.
#pragma once

#include <string>

namespace lockstep::app {

/// IoError unless `path` (given as `flag`) can be written as a regular file: what it names, after
/// following symbolic links, is a regular file or nothing, and its directory exists. The message
/// names the flag, the path (and the link's target) and what lies there.
void check_output_path(const std::string& flag, const std::string& path);

/// IoError when `dir` exists (after following symbolic links) but is not a directory; a missing
/// one is created with the first checkpoint.
void check_output_dir(const std::string& flag, const std::string& dir);

}  // namespace lockstep::app
