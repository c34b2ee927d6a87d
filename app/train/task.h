// What one kind of training supplies to `lockstep train`'s one run loop (trainer.cpp): its data and
// model, its batches, its reports and what its files carry. Two kinds today:
// - classifier_task.cpp: epochs over a data::DataLoader of rows (an mlp:, a layer list, resnet20),
//   cross-entropy, accuracy and the per-epoch validation, a per-epoch LR schedule;
// - language_model_task.cpp: iterations over random windows of a text (gpt: models), nanoGPT's
//   loss, estimate_loss every --eval-interval steps, the vocabulary, a per-iteration schedule.
// A third kind is one more implementation of Task and a line in Trainer::setup that picks it.
//
// The loop (Trainer::run) trains in periods (an epoch; the steps up to an evaluation) of steps:
//   while (!done()) {
//     [a signal check: before_period()]  begin_period()
//     while (batch = next_batch()) {
//       zero_grad; loss = forward_backward; clip; step; scheduler step;  after_step()
//       [a signal check; the period's last step ends the period]
//     }
//     end_period() (the report); a checkpoint; a signal check
//   }
//   finish(); --save; summary()
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "files/checkpoint.h"
#include "lockstep/lockstep.h"
#include "train/run.h"

namespace lockstep::app {

/// One batch of a step, as a task hands it to the loop.
struct Batch {
  /// This rank's part of the global batch (Run::local_part): inputs and targets.
  Tensor x, y;
  /// The global batch's rows.
  std::int64_t rows = 0;
  /// The step in messages: "epoch 2 step 7 (batch 3 of 4)", "iteration 5".
  std::string at;
  /// The first batch of a --accumulate-steps group (zero_grad before it), the group's last (its
  /// forward_backward reduces and the optimizer steps; the others accumulate under no_sync()), the
  /// step after which the LR scheduler steps, the period's last step.
  bool zero_grad = true, steps = true, schedule = true, ends_period = false;
};

/// What the ranks must agree on besides the flags (Guards::check_same_setup).
struct RankData {
  Tensor train, val;
  std::int64_t classes = 0;
};

class Task {
 public:
  virtual ~Task() = default;

  // Setup (Trainer::setup, in this order).

  /// The data and run.model (with --init), run.loss / run.count and run.r.eval_rows; the memory
  /// budget (run.guards) is checked before the model is allocated.
  virtual void load(Run& run) = 0;
  virtual RankData rank_data() const = 0;
  /// Checks that need the setup every rank agreed on (before the model is wrapped).
  virtual void check_setup(const Run& /*run*/) const {}
  /// The optimizer's parameter groups and the LR scheduler (nullptr: a constant lr).
  virtual std::vector<optim::ParamGroup> param_groups(const Run& run) const = 0;
  virtual std::unique_ptr<optim::LRScheduler> make_scheduler(const Run& run) const = 0;

  // Files.

  /// What --save and the checkpoints carry in `__metadata__` besides the position.
  virtual std::map<std::string, std::string> metadata() const { return {}; }
  /// The task's part of a checkpoint's position: written at a period's end or, `mid_period`, after
  /// the last step of an interrupted period; read back by --resume.
  virtual void save_position(TrainingPosition& p, bool mid_period) const = 0;
  virtual void resume(const Checkpoint& c) = 0;
  /// The --metrics key ("epoch", "iter") and how many of them `run` had done when it started.
  virtual std::string unit() const = 0;
  virtual std::int64_t units_done(const Run& run) const = 0;

  // The loop.

  virtual bool done(const Run& run) const = 0;
  /// {at, where} of a signal check before the next period ({} when there is none).
  virtual std::optional<std::pair<std::string, std::string>> before_period(const Run&) const {
    return std::nullopt;
  }
  virtual void begin_period(Run& run) = 0;
  /// The next batch of the period (nullopt once it has ended).
  virtual std::optional<Batch> next_batch(Run& run) = 0;
  /// After each batch's step (run.global_step counts the optimizer steps): its mean loss.
  virtual void after_step(Run& run, const Batch& batch, double loss) = 0;
  /// Where a run stopped after the period's latest step: "in epoch 2 after batch 3 of 4".
  virtual std::string stopped_in_period(const Run& run) const = 0;
  /// The period's report: evaluation, line, --metrics.
  virtual void end_period(Run& run) = 0;
  /// The period's end in errors ("the end of epoch 2, after step 8 of the run") and in a stop ("at
  /// the end of epoch 2").
  virtual std::string end_at(const Run& run) const = 0;
  virtual std::string stopped_at_end(const Run& run) const = 0;
  /// After the last period (a resumed run that trained nothing evaluates here); returns the run's
  /// last phase for Guards::honour_late_signal ("epoch 10", "iteration 20").
  virtual std::string finish(Run& run) = 0;
  /// The summary line (without the newline).
  virtual std::string summary(const Run& run) const = 0;
};

/// Epochs over a DataLoader of rows (classifier_task.cpp).
std::unique_ptr<Task> classifier_task();
/// Iterations over windows of a text (language_model_task.cpp).
std::unique_ptr<Task> language_model_task();

}  // namespace lockstep::app
