// The fail-clearly and never-lose-work guards of one `lockstep train` run behind one object that
// the run consults (train/trainer.cpp, train/train_setup.cpp), instead of checks sprinkled over the
// trainer. Each guard's rule lives in its own file; this class decides when it applies and words
// the outcome:
// - output paths (output_paths.h): every output checked writable and distinct before anything
//   loads, and the room for the first checkpoint and --save once the model's size is known;
// - memory budget (memory_budget.h): the training estimate against the memory available, before the
//   model is allocated;
// - rank agreement (rank_agreement.h): every rank started with the same setup, checked before the
//   first collective that depends on it;
// - checkpoint lock (checkpoint_dir_lock.h): one run at a time in a --checkpoint-dir;
// - signals (signals.h): polled after every optimizer step and at every period's end, agreed across
//   ranks, turned into Interrupted with what was written; a signal in the run's last phase is
//   honoured after the final save;
// - errors of a step: a distributed or data error names the step it happened in, a NaN/Inf loss
//   stops the run before the step that would use it (NonFiniteLossError naming the ranks);
// - the fault-injection hook of the fault-handling tests (LOCKSTEP_TEST_FAULT, distributed.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cli/options.h"
#include "guards/checkpoint_dir_lock.h"
#include "guards/memory_budget.h"
#include "lockstep/lockstep.h"
#include "ranks/distributed.h"
#include "train/progress.h"

namespace lockstep::app {

class Guards {
 public:
  /// Reads LOCKSTEP_TEST_FAULT (ValueError when malformed).
  Guards(const TrainOptions& o, const DistContext& dist);

  // Before training.

  /// Output paths: on every rank, so that all refuse alike (only rank 0 writes the files).
  void check_outputs() const;
  /// Memory budget: ValueError naming `what` (the --model) unless training `need` on `replicas`
  /// devices of this process with `optimizer` (state slots per parameter; with --zero across ranks
  /// 1/world of them) and batches of `batch` rows fits; `note` is appended.
  void check_memory(const std::string& what, const MemoryNeed& need, std::int64_t replicas,
                    const std::string& optimizer, std::int64_t batch,
                    const std::string& note) const;
  /// Rank agreement (across ranks, a collective): ValueError on every rank unless all run the same
  /// `fingerprint`, data (`train`, `val`: inputs or token streams; `classes`: classes or
  /// vocabulary) and, with --zero, the same `devices` count. Nothing with one rank.
  void check_same_setup(const std::string& fingerprint, const Tensor& train, const Tensor& val,
                        std::int64_t classes, std::size_t devices) const;
  /// IoError when an output's file system has less room than --save's `weights_bytes` or one
  /// checkpoint's `checkpoint_bytes`.
  void check_output_space(std::uint64_t weights_bytes, std::uint64_t checkpoint_bytes) const;
  /// Checkpoint lock: rank 0 with --checkpoint-dir takes the directory's lock for the run (and
  /// refuses a fresh run where checkpoints are).
  void lock_checkpoint_dir();
  /// From now on a signal is recorded for the run loop instead of ending the process; the bar of
  /// `progress` is cleared before any error message.
  void begin_training(Progress& progress);

  // During training.

  /// Runs `step` (one training step's work, returning its loss); a distributed or data error it
  /// throws is thrown again with " (at `at`)" appended, after the progress bar is cleared.
  double guarded(const std::string& at, const std::function<double()>& step) const;
  /// Inside a catch block: rethrows the distributed or data error being handled with " (at `at`)"
  /// appended, any other error unchanged.
  [[noreturn]] void rethrow_at(const std::string& at) const;
  /// Applies LOCKSTEP_TEST_FAULT when it names this rank and `step` (1-based): DataError, a NaN
  /// batch, SIGSTOP or SIGKILL.
  void inject_fault(std::int64_t step, Tensor& x) const;
  /// NonFiniteLossError naming `at` and (DistributedDataParallel) the ranks whose share of `dp`'s
  /// last loss was not finite, unless `loss` is finite.
  void check_finite(double loss, const std::string& at, const parallel::DataParallel& dp) const;
  /// The signal every rank has pending, agreed across ranks (the largest; 0: none).
  int signal_now() const;
  /// signal_now() after the step named `at`; a distributed error of its collective (a rank stopped
  /// during the step shows up here) is thrown again with " (at `at`)" appended.
  int signal_after(const std::string& at) const;
  /// Interrupted by `signal` `where` ("after iteration 7 of 20"), naming `checkpoint` (written for
  /// the position reached; "" when none was).
  [[noreturn]] void interrupted(int signal, const std::string& where,
                                const std::string& checkpoint) const;
  /// After the final save: Interrupted for a signal that came in the run's last phase (`last`,
  /// "epoch 10", its final evaluation and save), saying that training had ended and what was
  /// written; nothing when none came.
  void honour_late_signal(const std::string& last) const;

 private:
  void clear_progress() const {
    if (progress_) progress_->clear();
  }
  const TrainOptions& o_;
  const DistContext& dist_;
  std::optional<InjectedFault> fault_;
  Progress* progress_ = nullptr;
  std::unique_ptr<CheckpointDirLock> dir_lock_;  // rank 0 with --checkpoint-dir
};

}  // namespace lockstep::app
