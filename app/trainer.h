// The inside of `lockstep train` (train.h), shared by its files: the option values a run
// resolves, the Trainer that holds one run's state, and the checks its setup makes. The Trainer's
// members are defined by concern: train_setup.cpp (setup), train_resume.cpp (--checkpoint-dir,
// --resume), train_ranks.cpp (what ranks must agree on), train_epoch.cpp (the step loop),
// train.cpp (the run from epoch to epoch, run_train), and for gpt: models train_text.cpp (text,
// model, estimate_loss, metadata) and train_iters.cpp (the run from iteration to iteration).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint.h"
#include "checkpoint_dir_lock.h"
#include "data_source.h"
#include "distributed.h"
#include "evaluate.h"
#include "lockstep/lockstep.h"
#include "lr_schedule.h"
#include "metrics.h"
#include "model_spec.h"
#include "options.h"
#include "output_paths.h"
#include "progress.h"
#include "signals.h"
#include "text_data.h"

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
  /// --zero across ranks with one device per rank, no compression, not --deterministic: the
  /// reducer reduce-scatters the gradient buckets (ReducerOptions::scatter) instead of
  /// all-reducing them, and --clip-grad-norm takes the norm from the ranks' shards.
  bool zero_scatter = false;
  /// gpt: models with --lr-schedule cosine: nanoGPT's min_lr and lr_decay_iters.
  double min_lr = 0.0;
  std::int64_t lr_decay_iters = 0;
};

/// --sync-bn / --no-sync-bn as given, else automatic: SyncBatchNorm when `replicas` (devices ×
/// ranks) > 1 or with --deterministic.
bool sync_batchnorm(const TrainOptions& o, std::int64_t replicas);

/// The run's "batchnorm: ..." line for a model with `layers` BatchNorm layers (0: none, no
/// line): which mode trains and over how many devices / ranks.
std::string batchnorm_line(const TrainOptions& o, bool sync, std::int64_t layers,
                           std::size_t devices, int world);

/// Deterministic mode across ranks with SyncBatchNorm needs a shard on every rank in every step:
/// ValueError naming the batch (--batch-size, or the epoch's last one of `samples` rows) whose
/// shards (of `shard_size`) are fewer than the `world` ranks.
void check_shards_per_rank(const TrainOptions& o, std::int64_t samples, int world,
                           std::int64_t shard_size);

/// A BatchNorm in training normalises each group of samples (the global batch with
/// SyncBatchNorm, each device's chunk of it without) with the statistics of that group: a group
/// of one sample whose BatchNorm input holds one value per channel (BatchNorm1d after a Linear)
/// cannot train (PyTorch: "Expected more than 1 value per channel when training"). ValueError
/// naming the layer, --batch-size and the training rows when a batch of the epoch (each full
/// one, or the last one: the rows modulo --batch-size) makes such a group on `devices` devices
/// per rank and `world` ranks; checked before training, from the spec (no model needed).
void check_batchnorm_batches(const TrainOptions& o, const ModelSpec& spec, const LoadedData& data,
                             bool sync, std::int64_t devices, int world);

// Checks made before training (train_checks.cpp).

/// --optimizer, or adamw (nanoGPT's) for a gpt: model when it was not given.
std::string resolved_optimizer(const TrainOptions& o);

/// Refuses flag combinations that make no sense (ValueError naming the flags).
void check_combinations(const TrainOptions& o);

/// gpt: models (`gpt`) and the others take different flags and data: ValueError naming the
/// flag given to the wrong kind (--epochs with a gpt: model, --max-iters without one, ...), text
/// data without a gpt: model or a gpt: model without text data, sgd or a step: schedule with a
/// gpt: model (train_text.cpp).
void check_training_kind(const TrainOptions& o, const ModelSpec& model);

/// --cuda-graphs needs training on exactly one GPU in one process (ValueError naming what the run
/// trains on, and why there is no GPU when there is none).
void check_cuda_graphs_devices(const TrainOptions& o, const std::vector<Device>& devices,
                               bool distributed);

// What a checkpoint records of the flags (train_resume.cpp).

/// The flags that shape the trajectory, one `--flag=value` per line: a checkpoint records them
/// and --resume refuses to continue under different ones. --epochs is part of it only for the
/// cosine schedule (whose T_max it is); devices are not (a run may resume on other devices).
std::string flags_fingerprint(const TrainOptions& o, const Resolved& r);

/// ValueError naming the checkpoint and the first flag that differs.
void check_same_flags(const std::string& saved, const std::string& now, const std::string& path);

/// One training run's mutable state.
class Trainer {
 public:
  Trainer(const TrainOptions& options, std::ostream& out, DistContext dist)
      : o_(options), out_(out), dist_(std::move(dist)), fault_(injected_fault()) {}
  void run();

 private:
  void setup();
  /// gpt: models (train_text.cpp): the text, the vocabulary, the memory check for `replicas`
  /// devices of this process and the GPT (from --seed or --init).
  void setup_text_model(std::int64_t replicas);
  /// The optimizer (optimizer_class, or ZeroRedundancyOptimizer with --zero across ranks; gpt:
  /// models: weight-decay groups) and LR scheduler.
  void setup_optimizer();
  /// --zero across ranks: "zero: this rank holds B bytes of optimizer state (the state of E of T
  /// parameter elements, R ranks)\n", printed before the summary (measured state_bytes()); ""
  /// otherwise or with --quiet.
  std::string zero_line() const;
  /// With --bucket-cap-mb given, where a reducer sums the gradients (devices x ranks > 1, not
  /// --deterministic, whose shards are summed without buckets): "gradient buckets: N
  /// (--bucket-cap-mb MB)", N the reducer's buckets (DataParallel::gradient_buckets(): reverse
  /// parameter order, a new bucket where the next parameter would take it past int(MB * 2^20)
  /// bytes); "" otherwise or with --quiet.
  std::string buckets_line() const;
  /// The run of a gpt: model from iteration to iteration (train_iters.cpp).
  void run_iterations();
  /// nanoGPT's estimate_loss for one part: the mean loss over --eval-iters batches of
  /// --batch-size windows drawn from Generator(seed, stream), the same at every evaluation.
  double estimate_loss(const Tensor& tokens, std::uint64_t stream);
  /// The metadata a gpt: model's files carry: vocabulary and model (text_data.h, gpt_spec.h).
  std::map<std::string, std::string> text_metadata() const;
  void resume_from_checkpoint();
  /// --resume of a gpt: model: the checkpoint's vocabulary must be the text's (ValueError
  /// naming both sizes otherwise); the window generator continues where it was.
  void resume_text(const Checkpoint& c);
  /// Trains epoch `epoch` (1-based) from batch `first_batch`; returns its stats.
  EpochStats train_epoch(std::int64_t epoch, std::int64_t first_batch);
  std::optional<EvalResult> validate();
  TrainingPosition position(std::int64_t epochs_done, std::int64_t batch_in_epoch) const;
  std::string write_checkpoint_at(std::int64_t epochs_done, std::int64_t batch_in_epoch);
  /// Every rank's pending signal, agreed across ranks (see agree_on_signal).
  int signal_now() const { return agree_on_signal(dist_, pending_signal()); }
  /// This rank's part of a global batch: all of it alone; across ranks the split DataParallel
  /// uses across devices (tensor_split, or whole shards in deterministic mode).
  std::pair<std::int64_t, std::int64_t> local_part(std::int64_t batch) const;
  /// Across ranks: ValueError on every rank unless all were started with the same setup
  /// (rank_agreement.h), checked before the first collective that depends on it.
  void check_same_setup_on_every_rank() const;
  /// Inside a catch block: rethrows the distributed or data error being handled with " (at
  /// `at`)" appended (the step it happened in), any other error unchanged.
  [[noreturn]] void rethrow_at(const std::string& at) const;
  /// Runs one training step's `step` (returning its loss); a distributed or data error it throws
  /// is thrown again with " (at `at`)" appended, after the progress bar is cleared.
  double guarded_step(const std::string& at, const std::function<double()>& step);
  /// NonFiniteLossError naming `at` (and the ranks) unless `loss` is finite.
  void check_finite(double loss, const std::string& at);
  /// --clip-grad-norm: clips the reduced gradients to that total norm (nothing without the flag).
  void clip_gradients();
  /// --save: rank 0 writes the final parameters (with a gpt: model's metadata), every rank
  /// waits for it.
  void save_final();
  /// signal_now() after the step named `at`; a distributed error of its collective (a rank
  /// stopped during the step shows up here) is thrown again with " (at `at`)" appended.
  int signal_after(const std::string& at) const;
  /// Applies LOCKSTEP_TEST_FAULT when it names this rank and `step`.
  void inject_fault(std::int64_t step, Tensor& x) const;
  /// " on rank R" / " on ranks R,S" for the ranks whose share of the last loss was not finite.
  std::string nonfinite_ranks() const;
  /// After the final save: Interrupted for a signal that came in the run's last phase (the
  /// last step, the final evaluation, the final checkpoint and save), saying that training had
  /// ended and what was written; nothing when none came.
  void honour_late_signal(const std::string& last);
  [[noreturn]] void interrupted(int signal, const std::string& where,
                                const std::string& checkpoint);

  const TrainOptions& o_;
  std::ostream& out_;
  DistContext dist_;
  std::optional<InjectedFault> fault_;
  Clock::time_point start_ = Clock::now();
  Resolved r_;
  LoadedData data_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<parallel::DataParallel> dp_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LRScheduler> scheduler_;
  std::unique_ptr<parallel::CUDAGraphStep> graph_step_;  // --cuda-graphs
  std::unique_ptr<data::DataLoader> loader_;
  // gpt: models: the text and the generator of the training windows.
  std::optional<TextCorpus> text_;
  Generator windows_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<CheckpointDirLock> dir_lock_;  // rank 0 with --checkpoint-dir
  nn::CrossEntropyLoss criterion_;
  std::string fingerprint_;
  // Where training stands.
  std::int64_t epochs_done_ = 0, resume_batch_ = 0, global_step_ = 0, epoch_samples_ = 0;
  double epoch_loss_sum_ = 0.0;
};

}  // namespace lockstep::app
