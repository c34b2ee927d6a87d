// `lockstep train --checkpoint-dir` and `--resume` (resume.cpp): the flags a checkpoint records,
// writing a checkpoint of the position reached, and resuming from the newest one (bit-identical to
// the run that was not interrupted). The format: files/checkpoint.h.
#pragma once

#include <string>

#include "cli/options.h"
#include "train/run.h"
#include "train/task.h"

namespace lockstep::app {

/// The flags that shape the trajectory, one `--flag=value` per line: a checkpoint records them and
/// --resume refuses to continue under different ones. --epochs is part of it only for the cosine
/// schedule (whose T_max it is); devices are not (a run may resume on other devices).
std::string flags_fingerprint(const TrainOptions& o, const Resolved& r);

/// ValueError naming the checkpoint and the first flag that differs.
void check_same_flags(const std::string& saved, const std::string& now, const std::string& path);

/// Writes a checkpoint of `run` and `task`'s position (at a period's end, or `mid_period` after its
/// latest step) into --checkpoint-dir: only rank 0 writes (atomically), every rank waits for it (a
/// collective; with --zero the optimizer's state is gathered from the ranks first). Returns the
/// file's path ("(written by rank 0)" on the other ranks).
std::string write_run_checkpoint(Run& run, const Task& task, bool mid_period);

/// --resume: the newest checkpoint of --checkpoint-dir (read by rank 0, broadcast to the others)
/// into the wrapped model, optimizer, scheduler, generators and position of `run` and `task`.
/// ValueError when its flags differ from the run's (check_same_flags), StateDictError (naming the
/// file) when it does not fit the model.
void resume_from_checkpoint(Run& run, Task& task);

}  // namespace lockstep::app
