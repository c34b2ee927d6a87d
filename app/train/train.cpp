// `lockstep train` (see train.h): the run from epoch to epoch and how it ends (see trainer.h
// for the files that hold the rest of the Trainer).
#include "train/train.h"

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <string>

#include "cli/exit_status.h"
#include "lockstep/lockstep.h"
#include "train/metrics.h"
#include "ranks/rank_hosts.h"
#include "guards/signals.h"
#include "train/trainer.h"
#include "files/weights.h"

namespace lockstep::app {

void Trainer::interrupted(int signal, const std::string& where, const std::string& checkpoint) {
  progress_->clear();
  std::string message = std::string("interrupted by ") + signal_name(signal) + " " + where;
  if (!checkpoint.empty())
    message += "; checkpoint " + checkpoint + " (continue with --resume)";
  else if (o_.checkpoint_dir.empty())
    message += "; no checkpoint written (no --checkpoint-dir)";
  else  // a signal during setup: nothing of this run to save
    message += "; no checkpoint written (nothing trained yet in this run)";
  throw Interrupted(signal, message);
}

void Trainer::honour_late_signal(const std::string& last) {
  const int signal = signal_now();
  if (signal == 0) return;
  progress_->clear();
  std::string message = std::string("interrupted by ") + signal_name(signal) + " in the run's " +
                        "last phase (" + last + ", its final evaluation and save): training had " +
                        "ended";
  if (!o_.save.empty()) message += "; the trained weights were written to --save " + o_.save;
  if (!o_.checkpoint_dir.empty())
    message += "; its last checkpoint is in --checkpoint-dir " + o_.checkpoint_dir;
  if (o_.save.empty() && o_.checkpoint_dir.empty())
    message += "; nothing was written (no --save, no --checkpoint-dir)";
  throw Interrupted(signal, message);
}

std::optional<EvalResult> Trainer::validate() {
  if (!data_.has_validation()) return std::nullopt;
  dp_->eval();
  EvalResult r = evaluate_across_ranks(
      dist_, [this](const Tensor& x) { return dp_->forward(x); }, data_.val_x, data_.val_y,
      r_.eval_rows);
  dp_->train();
  return r;
}

void Trainer::save_final() {
  if (!o_.save.empty() && dist_.is_main())
    save_final_weights(*model_, o_, text_ ? text_metadata() : std::map<std::string, std::string>{});
  // The other ranks wait for rank 0's file, and so hear of it (notify_failure) if it failed;
  // whether or not --save was given (rank 0 alone acts on it, so it may differ across ranks).
  if (dist_.group && dist_.world > 1) dist_.group->barrier();
}

void Trainer::run() {
  setup();
  begin_training();  // from here a signal is acted on after the current step (signals.h)
  if (text_) return run_iterations();
  std::optional<double> val_loss, val_accuracy;
  // A rank lost in a collective between epochs is named with the step too (rethrow_at).
  auto at_boundary = [this](std::int64_t epoch) {
    return "the end of epoch " + std::to_string(epoch) + ", after step " +
           std::to_string(global_step_) + " of the run";
  };
  for (std::int64_t epoch = epochs_done_ + 1; epoch <= o_.epochs; ++epoch) {
    int sig = signal_after(at_boundary(epoch - 1));
    if (sig != 0) interrupted(sig, "before epoch " + std::to_string(epoch), "");
    const std::int64_t first_batch = epoch == epochs_done_ + 1 ? resume_batch_ : 0;
    EpochStats s = train_epoch(epoch, first_batch);
    val_loss = s.val_loss, val_accuracy = s.val_accuracy;
    progress_->end_epoch(epoch_line(s));
    if (metrics_) metrics_->append(s, r_.devices, dist_.world);
    std::string checkpoint;
    try {
      if (!o_.checkpoint_dir.empty()) checkpoint = write_checkpoint_at(epoch, 0);
      sig = signal_now();
    } catch (const DistError&) {
      rethrow_at(at_boundary(epoch));
    }
    if (sig != 0 && epoch < o_.epochs)
      interrupted(sig, "at the end of epoch " + std::to_string(epoch), checkpoint);
  }
  const std::int64_t trained = std::max(o_.epochs, epochs_done_);
  if (epochs_done_ >= o_.epochs) {  // resumed at or past --epochs: report the model as it is
    if (auto v = validate()) val_loss = v->loss, val_accuracy = v->accuracy;
  }
  save_final();
  honour_late_signal("epoch " + std::to_string(trained));
  out_ << zero_line()
       << summary_line(trained, val_loss, val_accuracy, seconds_since(start_), r_.devices,
                       dist_.world)
       << ranks_on_hosts() << '\n'
       << std::flush;
}

void run_train(const TrainOptions& options, std::ostream& out) {
  DistContext dist = init_distributed(options.dist);
  std::ostream silent(nullptr);  // ranks other than 0 print nothing (unless --log-all-ranks)
  Trainer trainer(options, dist.prints ? out : silent, dist);
  trainer.run();
}

}  // namespace lockstep::app
