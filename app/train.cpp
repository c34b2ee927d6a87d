// `lockstep train` (see train.h).
#include "train.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <string>

#include "checkpoint.h"
#include "data_source.h"
#include "distributed.h"
#include "evaluate.h"
#include "exit_status.h"
#include "lockstep/lockstep.h"
#include "lr_schedule.h"
#include "metrics.h"
#include "model_spec.h"
#include "progress.h"
#include "signals.h"
#include "weights.h"

namespace lockstep::app {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// `v` with 17 significant digits: the same double always prints the same text.
std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// The option values a run uses once the defaults that depend on other flags are filled in.
struct Resolved {
  double lr = 0.0, weight_decay = 0.0;
  LrSchedule schedule;
  MlpSpec model;
  std::vector<Device> devices;
};

/// Refuses flag combinations that make no sense (ValueError naming the flags).
void check_combinations(const TrainOptions& o) {
  if (o.optimizer != "sgd" && o.optimizer != "adam" && o.optimizer != "adamw")
    throw ValueError("--optimizer: expected sgd, adam or adamw, got '" + o.optimizer + "'");
  if (o.optimizer != "sgd" && !o.sgd_flags_given.empty())
    throw ValueError(o.sgd_flags_given.front() + " applies to --optimizer sgd only (not " +
                     o.optimizer + ")");
  if (o.optimizer == "sgd" && !o.adam_flags_given.empty())
    throw ValueError(o.adam_flags_given.front() + " applies to --optimizer adam and adamw only");
  if (o.resume && !o.init.empty())
    throw ValueError(
        "--resume and --init cannot be used together (the checkpoint holds the "
        "parameters to start from)");
  if (o.resume && o.checkpoint_dir.empty())
    throw ValueError("--resume needs --checkpoint-dir DIR (where the checkpoints are)");
  if (o.cuda_graphs) {
    // What a captured step does not cover (docs/cuda.md, "Not in this slice").
    std::string flag;
    if (o.clip_grad_norm)
      flag = "--clip-grad-norm (the clipping reads the norm on the host)";
    else if (o.accumulate_steps != 1)
      flag = "--accumulate-steps (no_sync() steps are not captured)";
    else if (o.precision != "fp32")
      flag = "--precision " + o.precision + " (fp32 only)";
    else if (o.deterministic)
      flag = "--deterministic (its fixed-order shard sums are not captured)";
    else if (o.model.dropout > 0)
      flag = "--dropout (a captured mask would be repeated by every replay)";
    if (!flag.empty()) throw ValueError("--cuda-graphs cannot be used with " + flag);
  }
}

/// --cuda-graphs needs training on exactly one GPU in one process (ValueError naming what the run
/// trains on, and why there is no GPU when there is none).
void check_cuda_graphs_devices(const TrainOptions& o, const std::vector<Device>& devices,
                               bool distributed) {
  if (!o.cuda_graphs) return;
  if (distributed)
    throw ValueError(
        "--cuda-graphs is not supported across processes (--backend nccl / mpirun): "
        "DistributedDataParallel's step is not captured; train one process on one GPU");
  std::string list;
  for (const Device& d : devices) list += (list.empty() ? "" : ",") + d.str();
  if (devices.size() == 1 && devices.front().is_cuda()) return;
  std::string why =
      "--cuda-graphs needs training on exactly one GPU (--devices cuda:K); this run "
      "trains on " +
      list;
  if (!cuda::is_available()) why += " (no usable GPU: " + cuda::unavailable_reason() + ")";
  throw ValueError(why);
}

/// IoError unless `path` can be created: its directory exists and `path` is not a directory
/// (checked before training, so a typo does not cost a whole run).
void check_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw IoError(flag + " " + path + ": directory " + dir.string() + " does not exist");
  if (fs::is_directory(p, ec)) throw IoError(flag + " " + path + ": is a directory");
}

/// IoError when `dir` exists but is not a directory (checked before training; a missing one is
/// created with the first checkpoint).
void check_output_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw IoError(flag + " " + dir + ": not a directory");
}

/// The flags that shape the trajectory, one `--flag=value` per line: a checkpoint records them
/// and --resume refuses to continue under different ones. --epochs is part of it only for the
/// cosine schedule (whose T_max it is); devices are not (a run may resume on other devices).
std::string flags_fingerprint(const TrainOptions& o, const Resolved& r) {
  std::string f;
  auto add = [&f](const std::string& flag, const std::string& value) {
    f += flag + "=" + value + "\n";
  };
  add("--data", o.data.spec);
  add("--label-column", std::to_string(o.data.label_column));
  add("--val-fraction", o.data.val_fraction ? exact(*o.data.val_fraction) : "default");
  add("--model", r.model.str());
  add("--activation", o.model.activation);
  add("--dropout", exact(o.model.dropout));
  add("--optimizer", o.optimizer);
  add("--lr", exact(r.lr));
  add("--weight-decay", exact(r.weight_decay));
  if (o.optimizer == "sgd") {
    add("--momentum", exact(o.momentum));
    add("--dampening", exact(o.dampening));
    add("--nesterov", o.nesterov ? "on" : "off");
  } else {
    add("--betas", exact(o.beta1) + "," + exact(o.beta2));
    add("--eps", exact(o.eps));
  }
  add("--lr-schedule", o.lr_schedule);
  if (r.schedule.kind == LrSchedule::Kind::Cosine) add("--epochs", std::to_string(o.epochs));
  add("--clip-grad-norm", o.clip_grad_norm ? exact(*o.clip_grad_norm) : "off");
  add("--accumulate-steps", std::to_string(o.accumulate_steps));
  add("--batch-size", std::to_string(o.batch_size));
  add("--seed", std::to_string(o.data.seed));
  add("--no-shuffle", o.no_shuffle ? "on" : "off");
  add("--deterministic", o.deterministic ? "on" : "off");
  // Only when not the default, so checkpoints written before the flag existed still resume.
  if (o.precision != "fp32") add("--precision", o.precision);
  return f;
}

/// ValueError naming the checkpoint and the first flag that differs.
void check_same_flags(const std::string& saved, const std::string& now, const std::string& path) {
  if (saved == now) return;
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    std::size_t pos = 0;
    while (pos < s.size()) {
      std::size_t nl = s.find('\n', pos);
      if (nl == std::string::npos) nl = s.size();
      v.push_back(s.substr(pos, nl - pos));
      pos = nl + 1;
    }
    return v;
  };
  const auto a = lines(saved), b = lines(now);
  std::string diff;
  for (const std::string& line : b)
    if (std::find(a.begin(), a.end(), line) == a.end()) {
      const std::string key = line.substr(0, line.find('=') + 1);
      std::string was = "(not set)";
      for (const std::string& s : a)
        if (s.rfind(key, 0) == 0) was = s;
      diff = line + " but the checkpoint has " + was;
      break;
    }
  // A flag recorded only when not at its default (--precision) is missing from `now` instead.
  for (const std::string& line : a)
    if (diff.empty() && std::find(b.begin(), b.end(), line) == b.end()) {
      const std::string key = line.substr(0, line.find('=') + 1);
      std::string is = "(not set)";
      if (key == "--precision=") is = "--precision=fp32 (the default)";
      for (const std::string& s : b)
        if (s.rfind(key, 0) == 0) is = s;
      diff = is + " but the checkpoint has " + line;
    }
  if (diff.empty()) diff = "different flags";
  throw ValueError("--resume: " + path + " was written with other training flags: " + diff);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, const Resolved& r,
                                                 std::vector<Tensor> params) {
  if (o.optimizer == "sgd")
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{.lr = r.lr,
                                                          .momentum = o.momentum,
                                                          .dampening = o.dampening,
                                                          .weight_decay = r.weight_decay,
                                                          .nesterov = o.nesterov});
  if (o.optimizer == "adam")
    return std::make_unique<optim::Adam>(std::move(params),
                                         optim::AdamOptions{.lr = r.lr,
                                                            .beta1 = o.beta1,
                                                            .beta2 = o.beta2,
                                                            .eps = o.eps,
                                                            .weight_decay = r.weight_decay});
  return std::make_unique<optim::AdamW>(std::move(params),
                                        optim::AdamWOptions{.lr = r.lr,
                                                            .beta1 = o.beta1,
                                                            .beta2 = o.beta2,
                                                            .eps = o.eps,
                                                            .weight_decay = r.weight_decay});
}

/// One training run's mutable state.
class Trainer {
 public:
  Trainer(const TrainOptions& options, std::ostream& out, DistContext dist)
      : o_(options), out_(out), dist_(std::move(dist)), fault_(injected_fault()) {}
  void run();

 private:
  void setup();
  void resume_from_checkpoint();
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
  /// Across ranks: ValueError on every rank unless all were started with the same training
  /// flags, epochs and resume setting on data of the same shape (checked before the first
  /// collective that depends on them).
  void check_same_setup_on_every_rank() const;
  /// Applies LOCKSTEP_TEST_FAULT when it names this rank and `step`.
  void inject_fault(std::int64_t step, Tensor& x) const;
  /// " on rank R" / " on ranks R,S" for the ranks whose share of the last loss was not finite.
  std::string nonfinite_ranks() const;
  [[noreturn]] void interrupted(int signal, const std::string& where,
                                const std::string& checkpoint);

  const TrainOptions& o_;
  std::ostream& out_;
  DistContext dist_;
  std::optional<InjectedFault> fault_;
  Clock::time_point start_ = Clock::now();
  Resolved r_;
  LoadedData data_;
  std::shared_ptr<nn::Sequential> model_;
  std::unique_ptr<parallel::DataParallel> dp_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LRScheduler> scheduler_;
  std::unique_ptr<parallel::CUDAGraphStep> graph_step_;  // --cuda-graphs
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<MetricsLog> metrics_;
  nn::CrossEntropyLoss criterion_;
  std::string fingerprint_;
  // Where training stands.
  std::int64_t epochs_done_ = 0, resume_batch_ = 0, global_step_ = 0, epoch_samples_ = 0;
  double epoch_loss_sum_ = 0.0;
};

void Trainer::setup() {
  check_combinations(o_);
  check_output_path("--save", o_.save);
  check_output_path("--metrics", o_.metrics);
  check_output_dir("--checkpoint-dir", o_.checkpoint_dir);
  r_.lr = o_.lr.value_or(o_.optimizer == "sgd" ? 0.01 : 0.001);
  r_.weight_decay = o_.weight_decay.value_or(o_.optimizer == "adamw" ? 0.01 : 0.0);
  r_.schedule = parse_lr_schedule(o_.lr_schedule);
  // Across ranks (one process per device is the usual layout) a rank uses one device unless
  // --devices gives it several; with --backend nccl it is the rank's GPU, cuda:(local rank).
  if (dist_.device && !o_.devices.empty() &&
      (o_.devices.size() != 1 || o_.devices.front() != *dist_.device)) {
    std::string list;
    for (const Device& d : o_.devices) list += (list.empty() ? "" : ",") + d.str();
    throw ValueError("--devices " + list +
                     " with --backend nccl: each rank trains on one GPU, "
                     "cuda:LOCAL_RANK (this rank: " +
                     dist_.device->str() + "); leave --devices out");
  }
  r_.devices = dist_.device          ? std::vector<Device>{*dist_.device}
               : !o_.devices.empty() ? o_.devices
               : dist_.group         ? std::vector<Device>{cpu(0)}
                                     : parallel::default_devices();
  for (const Device& d : r_.devices) check_device_available(d);
  check_cuda_graphs_devices(o_, r_.devices, dist_.group != nullptr);

  // Data first, then the model: with synthetic data both come from the default generator in
  // this order, as in the reference program.
  manual_seed(o_.data.seed);
  data_ = load_data(o_.data);
  r_.model = o_.model.spec.empty()
                 ? default_mlp_spec(data_.synthetic, data_.features, data_.classes)
                 : parse_mlp_spec(o_.model.spec);
  check_mlp_fits(r_.model, data_.features, data_.classes, data_.train_name);
  check_mlp_memory(r_.model, /*copies=*/2,
                   o_.model.spec.empty()
                       ? default_mlp_note(data_.features, data_.classes, data_.train_name)
                       : "");
  model_ = make_mlp(r_.model, o_.model.activation, o_.model.dropout);
  if (!o_.init.empty()) load_weights(*model_, o_.init, "--init");
  fingerprint_ = flags_fingerprint(o_, r_);
  if (dist_.world > 1) check_same_setup_on_every_rank();

  if (dist_.group) {
    parallel::DistributedDataParallelOptions ddp_options;
    ddp_options.device_ids = r_.devices;
    ddp_options.deterministic = o_.deterministic;
    ddp_options.seed = o_.data.seed;
    dp_ = std::make_unique<parallel::DistributedDataParallel>(model_, dist_.group, ddp_options);
  } else {
    parallel::DataParallelOptions dp_options;
    dp_options.deterministic = o_.deterministic;
    dp_options.seed = o_.data.seed;
    dp_ = std::make_unique<parallel::DataParallel>(model_, r_.devices, std::nullopt, dp_options);
  }
  optimizer_ = make_optimizer(o_, r_, dp_->parameters());
  // One process: the optimizer is fused into forward_backward (DataParallel::
  // register_fused_optim; bit-identical to calling step() after it), so its update runs on the
  // device workers. Not with --clip-grad-norm, which must see the gradients before the step, nor
  // across ranks, where it would only move the same step() into forward_backward.
  if (!dist_.group && !o_.clip_grad_norm) dp_->register_fused_optim(optimizer_);
  scheduler_ = make_scheduler(r_.schedule, *optimizer_, o_.epochs);
  if (o_.resume) resume_from_checkpoint();
  // --cuda-graphs: every step through the graphed step (replays once the shape is static; the
  // last partial batch eagerly). Resuming across eager and graphed runs is allowed (same math),
  // so the flag is not part of the fingerprint.
  if (o_.cuda_graphs) graph_step_ = std::make_unique<parallel::CUDAGraphStep>(*dp_, optimizer_);

  auto dataset = std::make_shared<data::TensorDataset>(data_.train_x, data_.train_y);
  loader_ = std::make_unique<data::DataLoader>(dataset,
                                               data::DataLoaderOptions{.batch_size = o_.batch_size,
                                                                       .shuffle = !o_.no_shuffle,
                                                                       .drop_last = false,
                                                                       .seed = o_.data.seed});
  progress_ = std::make_unique<Progress>(out_, Progress::mode_for_stdout(o_.quiet), o_.epochs);
  if (!o_.metrics.empty() && dist_.is_main())  // only rank 0 writes files
    metrics_ = std::make_unique<MetricsLog>(
        o_.metrics, o_.resume ? std::optional<std::int64_t>(epochs_done_) : std::nullopt);
}

void Trainer::resume_from_checkpoint() {
  const std::optional<std::string> path = find_latest_checkpoint(o_.checkpoint_dir);
  if (!path) throw ValueError("--resume: no checkpoint in " + o_.checkpoint_dir);
  Checkpoint c = read_checkpoint(*path);
  check_same_flags(c.position.flags, fingerprint_, *path);
  try {
    dp_->load_state_dict(c.model, /*strict=*/true);
    optimizer_->load_state_dict(c.optimizer);
    if (scheduler_) scheduler_->load_state_dict(c.scheduler);
  } catch (const StateDictError& e) {
    throw StateDictError("--resume " + *path + ": " + e.what());
  }
  const TrainingPosition& p = c.position;
  dp_->set_step_count(p.dp_step_count);
  default_generator().manual_seed(p.generator_seed);
  default_generator().set_offset(p.generator_offset);
  epochs_done_ = p.epochs_done;
  resume_batch_ = p.batch_in_epoch;
  global_step_ = p.global_step;
  epoch_loss_sum_ = p.epoch_loss_sum;
  epoch_samples_ = p.epoch_samples;
}

TrainingPosition Trainer::position(std::int64_t epochs_done, std::int64_t batch_in_epoch) const {
  TrainingPosition p;
  p.epochs_done = epochs_done;
  p.batch_in_epoch = batch_in_epoch;
  p.global_step = global_step_;
  p.dp_step_count = dp_->step_count();
  p.epoch_loss_sum = batch_in_epoch == 0 ? 0.0 : epoch_loss_sum_;
  p.epoch_samples = batch_in_epoch == 0 ? 0 : epoch_samples_;
  p.generator_seed = default_generator().seed();
  p.generator_offset = default_generator().offset();
  p.seed = o_.data.seed;
  p.flags = fingerprint_;
  return p;
}

std::string Trainer::write_checkpoint_at(std::int64_t epochs_done, std::int64_t batch_in_epoch) {
  // Only rank 0 writes (atomically: a temporary file renamed into place); every rank waits for
  // it, so a rank that loads the checkpoint next never sees a missing or partial file.
  std::string path = "(written by rank 0)";
  if (dist_.is_main())
    path = write_checkpoint(o_.checkpoint_dir, dp_->state_dict(), optimizer_->state_dict(),
                            scheduler_ ? scheduler_->state_dict() : StateDict(),
                            position(epochs_done, batch_in_epoch));
  if (dist_.group && dist_.world > 1) dist_.group->barrier();
  return path;
}

std::pair<std::int64_t, std::int64_t> Trainer::local_part(std::int64_t batch) const {
  if (dist_.world == 1) return {0, batch};
  const std::int64_t shard = o_.deterministic ? parallel::DataParallelOptions{}.shard_size : 0;
  return parallel::split_batch(batch, dist_.world, shard)[static_cast<std::size_t>(dist_.rank)];
}

void Trainer::check_same_setup_on_every_rank() const {
  std::string setup = fingerprint_ + "--epochs=" + std::to_string(o_.epochs) +
                      "\n--resume=" + (o_.resume ? "on" : "off") +
                      "\ntrain=" + data_.train_x.shape().str() +
                      "\nval=" + (data_.val_x.defined() ? data_.val_x.shape().str() : "none") +
                      "\nclasses=" + std::to_string(data_.classes) + "\n";
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (unsigned char c : setup) h = (h ^ c) * 1099511628211ull;
  const auto mine = static_cast<std::int64_t>(h >> 1);
  std::vector<Tensor> all;
  for (int r = 0; r < dist_.world; ++r) all.push_back(zeros({1}, kInt64));
  dist_.group->all_gather(all, tensor(std::span<const std::int64_t>(&mine, 1)));
  std::string differing;
  const std::int64_t first = all[0].to_vector<std::int64_t>()[0];
  for (int r = 1; r < dist_.world; ++r)
    if (all[static_cast<std::size_t>(r)].to_vector<std::int64_t>()[0] != first)
      differing += (differing.empty() ? "" : ",") + std::to_string(r);
  if (!differing.empty())
    throw ValueError((differing.find(',') == std::string::npos ? "rank " : "ranks ") + differing +
                     " started with other training flags or data than rank 0 (every rank of an "
                     "mpirun job must run the same command on the same data)");
}

void Trainer::inject_fault(std::int64_t step, Tensor& x) const {
  if (!fault_ || fault_->rank != dist_.rank || fault_->step != step) return;
  if (fault_->kind == "data")
    throw DataError("injected fault (LOCKSTEP_TEST_FAULT) in the batch of step " +
                    std::to_string(step));
  if (fault_->kind == "nan") x = mul(x, std::nan(""));
  if (fault_->kind == "hang") std::raise(SIGSTOP);
  if (fault_->kind == "die") std::raise(SIGKILL);
}

std::string Trainer::nonfinite_ranks() const {
  auto* ddp = dynamic_cast<const parallel::DistributedDataParallel*>(dp_.get());
  if (!ddp || dist_.world == 1) return "";
  std::vector<int> bad;
  for (std::size_t r = 0; r < ddp->rank_losses().size(); ++r)
    if (!std::isfinite(ddp->rank_losses()[r])) bad.push_back(static_cast<int>(r));
  if (bad.empty()) return "";
  std::string s = bad.size() == 1 ? " on rank " : " on ranks ";
  for (std::size_t i = 0; i < bad.size(); ++i) s += (i ? "," : "") + std::to_string(bad[i]);
  return s;
}

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

std::optional<EvalResult> Trainer::validate() {
  if (!data_.has_validation()) return std::nullopt;
  dp_->eval();
  EvalResult r = evaluate_across_ranks(
      dist_, [this](const Tensor& x) { return dp_->forward(x); }, data_.val_x, data_.val_y);
  dp_->train();
  return r;
}

EpochStats Trainer::train_epoch(std::int64_t epoch, std::int64_t first_batch) {
  const auto epoch_start = Clock::now();
  const std::int64_t batches = loader_->size(), k = o_.accumulate_steps;
  const std::int64_t total_samples = data_.train_x.size(0);
  const std::int64_t samples_before = epoch_samples_;
  loader_->set_epoch(epoch - 1);  // the shuffle of epoch e is keyed by (seed, e - 1)
  dp_->train();
  progress_->begin_epoch(epoch, batches, total_samples, first_batch, epoch_samples_);

  std::int64_t b = 0;
  for (auto it = loader_->begin(); it != loader_->end(); ++it, ++b) {
    if (b < first_batch) continue;  // trained before the checkpoint this run resumed from
    const Tensor& x = it->data;
    const Tensor& y = it->target;
    // Across ranks every rank holds the whole global batch and trains on its own part of it.
    const auto [start, count] = local_part(x.size(0));
    Tensor xl = dist_.world == 1 ? x : x.narrow(0, start, count);
    const Tensor yl = dist_.world == 1 ? y : y.narrow(0, start, count);
    if (b % k == 0) optimizer_->zero_grad();
    // Gradient accumulation: the group's last batch (the K-th, or the epoch's last) reduces the
    // gradients of the whole group at once; the batches before it only accumulate (no_sync).
    const bool step_now = (b + 1) % k == 0 || b + 1 == batches;
    const std::string at = "epoch " + std::to_string(epoch) + " step " +
                           std::to_string(global_step_ + 1) + " (batch " + std::to_string(b + 1) +
                           " of " + std::to_string(batches) + ")";
    double loss = 0.0;
    try {
      inject_fault(global_step_ + 1, xl);
      // --precision bf16: the step's forward and loss under autocast (carried to the replica
      // workers by DataParallel); the backward inside forward_backward follows the graph.
      AutocastGuard precision(o_.precision == "bf16");
      if (graph_step_) {
        loss = graph_step_->step(xl, yl);  // zero_grad, step and optimizer step (fused)
      } else if (step_now) {
        loss = dp_->forward_backward(xl, yl, criterion_).item();
      } else {
        auto no_sync = dp_->no_sync();
        loss = dp_->forward_backward(xl, yl, criterion_).item();
      }
    } catch (const PeerFailedError& e) {
      progress_->clear();
      const std::string what = e.what();  // the failed rank's message may name the step itself
      throw PeerFailedError(
          what.find("(at epoch ") == std::string::npos ? what + " (at " + at + ")" : what, e.rank(),
          e.status());
    } catch (const TimeoutError& e) {
      progress_->clear();
      throw TimeoutError(std::string(e.what()) + " (at " + at + ")");
    } catch (const DistError& e) {
      progress_->clear();
      throw DistError(std::string(e.what()) + " (at " + at + ")");
    } catch (const DataError& e) {
      progress_->clear();
      throw DataError(std::string(e.what()) + " (at " + at + ")");
    }
    // The loss is the global batch's (identical on every rank), so every rank takes the same
    // decision here: no rank steps while another stops. With the fused optimizer the step
    // already changed the parameters in memory; nothing is written after this error, so what
    // the run leaves (checkpoints, --save) is the same.
    if (!std::isfinite(loss)) {
      progress_->clear();
      throw NonFiniteLossError("training loss is " + std::string(std::isnan(loss) ? "NaN" : "Inf") +
                               " at " + at + nonfinite_ranks() +
                               "; stopped before that step, no checkpoint written for it");
    }
    epoch_loss_sum_ += loss * static_cast<double>(x.size(0));
    epoch_samples_ += x.size(0);
    if (!step_now) continue;

    if (o_.clip_grad_norm) nn::utils::clip_grad_norm_(dp_->parameters(), *o_.clip_grad_norm);
    if (!dp_->fused_optim()) optimizer_->step();  // fused: forward_backward made the step
    ++global_step_;
    progress_->update(b + 1, epoch_samples_, epoch_loss_sum_ / static_cast<double>(epoch_samples_));
    if (const int sig = signal_now(); sig != 0 && b + 1 < batches) {
      const std::string where = "in epoch " + std::to_string(epoch) + " after batch " +
                                std::to_string(b + 1) + " of " + std::to_string(batches);
      interrupted(sig, where,
                  o_.checkpoint_dir.empty() ? "" : write_checkpoint_at(epoch - 1, b + 1));
    }
  }
  const double train_seconds = seconds_since(epoch_start);
  if (scheduler_) scheduler_->step();

  EpochStats s;
  s.epoch = epoch;
  s.epochs = o_.epochs;
  s.train_loss = epoch_loss_sum_ / static_cast<double>(epoch_samples_);
  if (auto v = validate()) s.val_loss = v->loss, s.val_accuracy = v->accuracy;
  s.samples_per_second =
      train_seconds > 0 ? static_cast<double>(epoch_samples_ - samples_before) / train_seconds : 0;
  s.seconds = seconds_since(epoch_start);
  epoch_loss_sum_ = 0.0;
  epoch_samples_ = 0;
  return s;
}

void Trainer::run() {
  setup();
  std::optional<double> val_loss, val_accuracy;
  for (std::int64_t epoch = epochs_done_ + 1; epoch <= o_.epochs; ++epoch) {
    if (const int sig = signal_now(); sig != 0)
      interrupted(sig, "before epoch " + std::to_string(epoch), "");
    const std::int64_t first_batch = epoch == epochs_done_ + 1 ? resume_batch_ : 0;
    EpochStats s = train_epoch(epoch, first_batch);
    val_loss = s.val_loss, val_accuracy = s.val_accuracy;
    progress_->end_epoch(epoch_line(s));
    if (metrics_) metrics_->append(s, r_.devices, dist_.world);
    std::string checkpoint;
    if (!o_.checkpoint_dir.empty()) checkpoint = write_checkpoint_at(epoch, 0);
    if (const int sig = signal_now(); sig != 0 && epoch < o_.epochs)
      interrupted(sig, "at the end of epoch " + std::to_string(epoch), checkpoint);
  }
  const std::int64_t trained = std::max(o_.epochs, epochs_done_);
  if (epochs_done_ >= o_.epochs) {  // resumed at or past --epochs: report the model as it is
    if (auto v = validate()) val_loss = v->loss, val_accuracy = v->accuracy;
  }
  if (!o_.save.empty() && dist_.is_main()) {
    try {
      save_weights(*model_, o_.save);
    } catch (const IoError& e) {
      throw IoError("--save: " + std::string(e.what()));
    }
  }
  // The other ranks wait for rank 0's file, and so hear of it (notify_failure) if it failed.
  if (!o_.save.empty() && dist_.group && dist_.world > 1) dist_.group->barrier();
  out_ << summary_line(trained, val_loss, val_accuracy, seconds_since(start_), r_.devices,
                       dist_.world)
       << '\n'
       << std::flush;
}

}  // namespace

void run_train(const TrainOptions& options, std::ostream& out) {
  DistContext dist = init_distributed(options.dist);
  std::ostream silent(nullptr);  // ranks other than 0 print nothing (unless --log-all-ranks)
  Trainer trainer(options, dist.prints ? out : silent, dist);
  trainer.run();
}

}  // namespace lockstep::app
