// The inside of `lockstep train` (train.h): the Trainer sets a run up (train_setup.cpp) and drives
// its one run loop (trainer.cpp) over the task that knows the kind of training (task.h: epochs of a
// classifier, iterations of a language model). Its state is the Run (run.h); what refuses or stops
// a run, the Run's Guards (guards/guards.h); checkpoints, resume.h.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "cli/options.h"
#include "ranks/distributed.h"
#include "train/run.h"
#include "train/task.h"

namespace lockstep::app {

class Trainer {
 public:
  Trainer(const TrainOptions& options, std::ostream& out, DistContext dist)
      : run_(options, out, std::move(dist)) {}
  /// Sets the run up, trains it and prints the summary (train.h's run_train).
  void run();

 private:
  /// Flag defaults, devices, the task's data and model, (Distributed)DataParallel, optimizer,
  /// scheduler, --resume, output (train_setup.cpp).
  void setup();
  /// The optimizer (the optimizer class, or ZeroRedundancyOptimizer with --zero across ranks, over
  /// the task's parameter groups) and the task's LR scheduler.
  void setup_optimizer();
  /// The run's header lines: which BatchNorm trains, and (--bucket-cap-mb) the reducer's gradient
  /// buckets; nothing with --quiet.
  void print_header(std::int64_t batchnorms) const;
  /// --zero across ranks: "zero: this rank holds B bytes of optimizer state (the state of E of T
  /// parameter elements, R ranks)\n", printed before the summary (measured state_bytes()); ""
  /// otherwise or with --quiet.
  std::string zero_line() const;
  /// One training step on `batch` (trainer.cpp): zero_grad, forward_backward, clip, step,
  /// scheduler; returns the global batch's mean loss.
  double step(Batch& batch);
  /// --clip-grad-norm on the reduced gradients (with --zero's reduce-scatter from the ranks'
  /// shards: ZeroRedundancyOptimizer::clip_grad_norm_, a collective).
  void clip_grad_norm();
  /// --save: rank 0 writes the final parameters (with the task's metadata), every rank waits.
  void save_final();

  Run run_;
  std::unique_ptr<Task> task_;
};

}  // namespace lockstep::app
