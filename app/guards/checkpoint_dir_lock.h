// One run at a time in a --checkpoint-dir (issue 23): a fresh run into a directory holding
// another run's checkpoints made a later --resume continue the older run, and two live runs on
// one directory overwrote each other's checkpoints. Rank 0 (the only writer) takes an exclusive
// flock(2) on the directory itself for the whole run, refuses a fresh run into a directory that
// holds checkpoints, and removes the temporaries that dead processes left there.
#pragma once

#include <string>

namespace lockstep::app {

class CheckpointDirLock {
 public:
  /// Creates `dir` when missing (following a link to its target) and locks it: IoError naming
  /// it when it cannot be created, or when
  /// another live process holds the lock (a second run on it). Holding the lock: ValueError when
  /// `resume` is false and the directory holds a checkpoint (naming the directory, the newest
  /// checkpoint and the ways out: --resume, or a new directory); then removes the temporary files
  /// (io::is_temporary_file) whose writer process (`NAME.tmp-PID-...`) no longer runs.
  CheckpointDirLock(const std::string& dir, bool resume);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

 private:
  int fd_ = -1;
};

/// The pid in a temporary's name (`NAME.tmp-PID-...`), or -1 when there is none.
long temporary_writer_pid(const std::string& filename);

}  // namespace lockstep::app
