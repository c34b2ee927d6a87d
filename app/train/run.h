// One `lockstep train` run's state, shared by the run loop (trainer.h) and the task it trains
// (task.h): the option values it resolves, the wrapped model, optimizer and scheduler, the output,
// the guards and where training stands.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/options.h"
#include "guards/guards.h"
#include "lockstep/lockstep.h"
#include "model/model_spec.h"
#include "ranks/distributed.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/progress.h"

namespace lockstep::app {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The option values a run uses once the defaults that depend on other flags are filled in.
struct Resolved {
  /// --optimizer, or adamw for a gpt: model without it.
  std::string optimizer;
  double lr = 0.0, weight_decay = 0.0;
  LrSchedule schedule;
  ModelSpec model;
  std::vector<Device> devices;
  /// Rows per evaluation forward (eval_chunk_rows).
  std::int64_t eval_rows = 8192;
  /// Whether the model's BatchNorm layers synchronize (SyncBatchNorm), see sync_batchnorm().
  bool sync_bn = false;
  /// --zero across ranks with one device per rank, no compression, not --deterministic: the reducer
  /// reduce-scatters the gradient buckets (ReducerOptions::scatter) instead of all-reducing them,
  /// and --clip-grad-norm takes the norm from the ranks' shards.
  bool zero_scatter = false;
  /// gpt: models with --lr-schedule cosine: nanoGPT's min_lr and lr_decay_iters.
  double min_lr = 0.0;
  std::int64_t lr_decay_iters = 0;
};

/// One training run: what Trainer::setup builds (the task fills in the model and the loss) and the
/// loop reads.
struct Run {
  Run(const TrainOptions& options, std::ostream& output, DistContext context)
      : o(options), out(output), dist(std::move(context)), guards(o, dist) {}

  const TrainOptions& o;
  std::ostream& out;
  DistContext dist;
  Guards guards;
  Clock::time_point start = Clock::now();
  Resolved r;
  std::shared_ptr<nn::Module> model;
  /// The loss of a step on each replica's chunk and its weight (count, empty: the chunk's rows);
  /// see DataParallel::forward_backward.
  parallel::LossFn loss;
  parallel::LossCount count;
  std::unique_ptr<parallel::DataParallel> dp;
  std::shared_ptr<optim::Optimizer> optimizer;
  std::unique_ptr<optim::LRScheduler> scheduler;
  std::unique_ptr<parallel::CUDAGraphStep> graph_step;  // --cuda-graphs
  std::unique_ptr<Progress> progress;
  std::unique_ptr<MetricsLog> metrics;  // rank 0 with --metrics
  /// The flags that shape the trajectory (flags_fingerprint, resume.h).
  std::string fingerprint;
  /// Optimizer steps taken since the start of training (over resumes).
  std::int64_t global_step = 0;

  /// This rank's part [start, start + count) of a global batch of `batch` rows: all of it alone;
  /// across ranks the split DataParallel uses across devices (tensor_split, or whole shards in
  /// deterministic mode).
  std::pair<std::int64_t, std::int64_t> local_part(std::int64_t batch) const {
    if (dist.world == 1) return {0, batch};
    const std::int64_t shard = o.deterministic ? parallel::DataParallelOptions{}.shard_size : 0;
    return parallel::split_batch(batch, dist.world, shard)[static_cast<std::size_t>(dist.rank)];
  }
};

}  // namespace lockstep::app
