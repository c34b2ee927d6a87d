// `lockstep train` (see train.h): the one run loop over a task (task.h) and its training step,
// which reads as llm.c's: zero_grad; loss = dp.forward_backward(x, y); clip; optimizer step;
// scheduler step. The guards (run_.guards) decide when a signal, an error or a NaN ends it.
#include "train/trainer.h"

#include <optional>
#include <ostream>
#include <string>

#include "guards/output_paths.h"
#include "lockstep/lockstep.h"
#include "ranks/rank_hosts.h"
#include "train/resume.h"
#include "train/train.h"

namespace lockstep::app {

double Trainer::step(Batch& b) {
  Run& r = run_;
  if (b.zero_grad) r.optimizer->zero_grad();
  const double loss = r.guards.guarded(b.at, [&] {
    r.guards.inject_fault(r.global_step + 1, b.x);
    // --precision bf16: the step's forward and loss under autocast (carried to the replica workers
    // by DataParallel); the backward inside forward_backward follows the graph.
    AutocastGuard precision(r.o.precision == "bf16");
    if (r.graph_step) return r.graph_step->step(b.x, b.y);  // with zero_grad and the step
    // Gradient accumulation: the group's last batch reduces the gradients of the whole group at
    // once; the batches before it only accumulate (no_sync).
    if (b.steps) return r.dp->forward_backward(b.x, b.y, r.loss, r.count).item();
    auto no_sync = r.dp->no_sync();
    return r.dp->forward_backward(b.x, b.y, r.loss, r.count).item();
  });
  r.guards.check_finite(loss, b.at, *r.dp);  // before the step that would use it
  if (b.steps && !r.graph_step)
    r.guards.guarded(b.at, [&] {
      clip_grad_norm();
      r.optimizer->step();
      return 0.0;
    });
  if (b.schedule && r.scheduler) r.scheduler->step();
  return loss;
}

void Trainer::clip_grad_norm() {
  if (!run_.o.clip_grad_norm) return;
  const double max_norm = *run_.o.clip_grad_norm;
  if (run_.r.zero_scatter)  // each rank holds its shard's sums only
    static_cast<parallel::ZeroRedundancyOptimizer&>(*run_.optimizer).clip_grad_norm_(max_norm);
  else
    nn::utils::clip_grad_norm_(run_.dp->parameters(), max_norm);
}

void Trainer::save_final() {
  const Run& r = run_;
  if (!r.o.save.empty() && r.dist.is_main()) save_final_weights(*r.model, r.o, task_->metadata());
  // The other ranks wait for rank 0's file, and so hear of it (notify_failure) if it failed;
  // whether or not --save was given (rank 0 alone acts on it, so it may differ across ranks).
  if (r.dist.group && r.dist.world > 1) r.dist.group->barrier();
}

void Trainer::run() {
  setup();
  Run& r = run_;
  const Guards& guards = r.guards;
  r.guards.begin_training(*r.progress);  // from here a signal ends the run after its step
  while (!task_->done(r)) {
    if (const auto before = task_->before_period(r))
      if (const int sig = guards.signal_after(before->first); sig != 0)
        guards.interrupted(sig, before->second, "");
    task_->begin_period(r);
    while (std::optional<Batch> b = task_->next_batch(r)) {
      const double loss = step(*b);
      if (b->steps) ++r.global_step;
      task_->after_step(r, *b, loss);
      if (!b->steps) continue;
      const int sig = guards.signal_after(b->at);
      if (b->ends_period) break;
      if (sig != 0)
        guards.interrupted(sig, task_->stopped_in_period(r),
                           r.o.checkpoint_dir.empty() ? "" : write_run_checkpoint(r, *task_, true));
    }
    task_->end_period(r);
    std::string checkpoint;
    int sig = 0;
    try {  // a rank lost in a collective here is named with the period's end
      if (!r.o.checkpoint_dir.empty()) checkpoint = write_run_checkpoint(r, *task_, false);
      sig = guards.signal_now();
    } catch (const DistError&) {
      guards.rethrow_at(task_->end_at(r));
    }
    if (sig != 0 && !task_->done(r)) guards.interrupted(sig, task_->stopped_at_end(r), checkpoint);
  }
  const std::string last = task_->finish(r);
  save_final();
  guards.honour_late_signal(last);
  r.out << zero_line() << task_->summary(r) << '\n' << std::flush;
}

void run_train(const TrainOptions& options, std::ostream& out) {
  DistContext dist = init_distributed(options.dist);
  std::ostream silent(nullptr);  // ranks other than 0 print nothing (unless --log-all-ranks)
  Trainer trainer(options, dist.prints ? out : silent, dist);
  trainer.run();
}

}  // namespace lockstep::app
