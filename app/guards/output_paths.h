// The files `lockstep train` writes (--save, --metrics, the checkpoints of --checkpoint-dir) and
// what is refused before training so that a run never ends by losing its work or damaging a
// file it was not meant to replace (issue 23):
// - outputs are regular files, replaced atomically (io::write_file_atomic); a symbolic link is
//   followed to its target (also one that does not exist yet), and a device, FIFO or socket is
//   refused (exit 2, naming the path) rather than written through or replaced;
// - every output is checked writable before the first step (a file is created, written, synced
//   and removed where it will go; the file system must have room for the file), so a read-only
//   or full target costs no training; outputs that are the same file as each other or as any
//   file the run reads are refused (issue 39: the files inside a fashion-mnist directory, the
//   --model @FILE, the checkpoint --resume continues; by device and inode, links and `..`
//   followed), except --save equal to --init (training in place: the write is atomic); so are
//   standard streams (/dev/stdout) and outputs under a checkpoint's name in --checkpoint-dir;
// - if the final --save write still fails, the weights go to a fallback file that the error line
//   names.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "lockstep/nn/module.h"
#include "cli/options.h"

namespace lockstep::app {

/// IoError unless `path` (given as `flag`) can be written as a regular file: it names no standard
/// stream (/dev/stdout, /dev/fd/N, /proc/self/fd/N, also through links), what it names after
/// following symbolic links is a regular file or nothing, and its directory exists. The message
/// names the flag, the path (and the link's target) and what lies there.
void check_output_path(const std::string& flag, const std::string& path);

/// IoError when `dir` exists (after following symbolic links) but is not a directory; a missing
/// one is created with the first checkpoint.
void check_output_dir(const std::string& flag, const std::string& dir);

/// Everything about the outputs that can be checked before the model exists, in this order:
/// check_output_path (--save, --metrics), check_output_dir (--checkpoint-dir), that a file can
/// be created and written where each output goes (for a --checkpoint-dir yet to be created: in
/// its nearest existing ancestor; IoError naming the flag, the path and the system's reason:
/// read-only file system, no space left, permission), that no output lies in --checkpoint-dir
/// under a checkpoint's name (epoch-*, iter-*), and that no output is the same file as another
/// output or as an input (--init, the --data files and those a fashion-mnist directory holds,
/// the --model @FILE, the checkpoint --resume continues), --save equal to --init excepted
/// (ValueError naming both flags).
void check_outputs(const TrainOptions& o);

/// IoError naming the flag, the bytes needed and the bytes free when the file system of an
/// output has less room than the file it will hold: `weights_bytes` for --save, `checkpoint_bytes`
/// for one checkpoint. (Checkpoints accumulate, one per epoch: only the first is checked.)
void check_output_space(const TrainOptions& o, std::uint64_t weights_bytes,
                        std::uint64_t checkpoint_bytes);

/// The bytes of a safetensors file holding `model`'s state_dict (tensor data plus a header
/// allowance).
std::uint64_t weights_file_bytes(const nn::Module& model);

/// Writes `model`'s weights to --save. When that fails, writes them to
/// `lockstep-save-<pid>.safetensors` in --checkpoint-dir, $TMPDIR (or /tmp) or the current
/// directory, the first that works, and throws IoError naming the failure and the fallback file
/// (or every place tried). `metadata` goes into the file's `__metadata__` (a gpt: model's
/// vocabulary and spec), the fallback's too.
void save_final_weights(const nn::Module& model, const TrainOptions& o,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace lockstep::app
