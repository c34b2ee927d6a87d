// `lockstep train`: a run's setup (see trainer.h): flag defaults, devices, the task's data and
// model, (Distributed)DataParallel, optimizer, scheduler, --resume and output.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/message_text.h"
#include "guards/output_paths.h"
#include "lockstep/lockstep.h"
#include "train/checks.h"
#include "train/resume.h"
#include "train/trainer.h"

namespace lockstep::app {
namespace {

/// The run's optimizer class with its options (parallel::optimizer_class): SGD over one group
/// (epoch-based models), Adam or AdamW over one group or nanoGPT's weight-decay groups (gpt:
/// models, which train with adam or adamw only: check_training_kind refuses sgd for them).
parallel::OptimizerFactory optimizer_class(const TrainOptions& o, const Resolved& r) {
  if (r.optimizer == "sgd")
    return parallel::optimizer_class(optim::SGDOptions{.lr = r.lr,
                                                       .momentum = o.momentum,
                                                       .dampening = o.dampening,
                                                       .weight_decay = r.weight_decay,
                                                       .nesterov = o.nesterov});
  if (r.optimizer == "adam")
    return parallel::optimizer_class(optim::AdamOptions{.lr = r.lr,
                                                        .beta1 = o.beta1,
                                                        .beta2 = o.beta2,
                                                        .eps = o.eps,
                                                        .weight_decay = r.weight_decay});
  return parallel::optimizer_class(optim::AdamWOptions{.lr = r.lr,
                                                       .beta1 = o.beta1,
                                                       .beta2 = o.beta2,
                                                       .eps = o.eps,
                                                       .weight_decay = r.weight_decay});
}

}  // namespace

void Trainer::setup_optimizer() {
  Run& r = run_;
  std::vector<optim::ParamGroup> groups = task_->param_groups(r);
  // --zero across ranks: the state sharded over the ranks (the shard per rank, its local devices
  // share it), partitioned by the reducer's buckets of the master parameters. One process: the
  // plain optimizer, which is what ZeRO over one rank computes.
  if (r.o.zero && r.dist.group && r.dist.world > 1)
    r.optimizer = std::make_shared<parallel::ZeroRedundancyOptimizer>(
        std::move(groups), optimizer_class(r.o, r.r), r.dist.group, parallel::zero_layout(*r.dp));
  else
    r.optimizer = optimizer_class(r.o, r.r)(std::move(groups));
  r.scheduler = task_->make_scheduler(r);
}

std::string Trainer::zero_line() const {
  const Run& r = run_;
  const auto* zero = dynamic_cast<const parallel::ZeroRedundancyOptimizer*>(r.optimizer.get());
  if (!zero || r.o.quiet) return "";
  std::int64_t mine = 0, total = 0;
  for (const parallel::ZeroPiece& p : zero->shard()) mine += p.hi - p.lo;
  for (const Tensor& p : zero->params()) total += p.numel();
  return "zero: this rank holds " + std::to_string(zero->state_bytes()) +
         " bytes of optimizer state (the state of " + std::to_string(mine) + " of " +
         std::to_string(total) + " parameter elements, " + std::to_string(r.dist.world) +
         " ranks)\n";
}

void Trainer::print_header(std::int64_t batchnorms) const {
  const Run& r = run_;
  if (r.o.quiet) return;
  // Which BatchNorm trains (models without BatchNorm print nothing here).
  if (const std::string line =
          batchnorm_line(r.o, r.r.sync_bn, batchnorms, r.r.devices.size(), r.dist.world);
      !line.empty())
    r.out << line << '\n' << std::flush;
  // With --bucket-cap-mb, where a reducer sums the gradients (devices x ranks > 1, not
  // --deterministic, whose shards are summed without buckets): "gradient buckets: N
  // (--bucket-cap-mb MB)", N the reducer's buckets (DataParallel::gradient_buckets(): reverse
  // parameter order, a new bucket where the next parameter would take it past int(MB * 2^20)
  // bytes).
  const auto replicas = static_cast<std::int64_t>(r.r.devices.size()) * r.dist.world;
  if (r.o.bucket_cap_given && replicas > 1 && !r.o.deterministic)
    r.out << "gradient buckets: " << r.dp->gradient_buckets().size() << " (--bucket-cap-mb "
          << typed_number(r.o.bucket_cap_mb) << ")\n"
          << std::flush;
}

void Trainer::setup() {
  Run& run = run_;
  const TrainOptions& o = run.o;
  const DistContext& dist = run.dist;
  Resolved& r = run.r;
  check_combinations(o);
  run.guards.check_outputs();
  // Across ranks (one process per device is the usual layout) a rank uses one device unless
  // --devices gives it several; with --backend nccl it is the rank's GPU, cuda:(local rank).
  if (dist.device && !o.devices.empty() &&
      (o.devices.size() != 1 || o.devices.front() != *dist.device)) {
    const std::string list = device_list(o.devices);
    throw ValueError("--devices " + list +
                     " with --backend nccl: each rank trains on one GPU, "
                     "cuda:LOCAL_RANK (this rank: " +
                     dist.device->str() + "); leave --devices out");
  }
  r.devices = dist.device          ? std::vector<Device>{*dist.device}
              : !o.devices.empty() ? o.devices
              : dist.group         ? std::vector<Device>{cpu(0)}
                                   : parallel::default_devices();
  for (const Device& d : r.devices) check_device_available(d);
  check_cuda_graphs_devices(o, r.devices, dist.group != nullptr);

  if (!o.model.spec.empty()) r.model = parse_model_spec(o.model.spec);
  check_training_kind(o, r.model);
  // gpt: models default to nanoGPT's AdamW.
  r.optimizer = resolved_optimizer(o);
  r.lr = o.lr.value_or(r.optimizer == "sgd" ? 0.01 : 0.001);
  r.weight_decay = o.weight_decay.value_or(r.optimizer == "adamw" ? 0.01 : 0.0);
  r.schedule = parse_lr_schedule(o.lr_schedule);
  r.min_lr = o.min_lr.value_or(r.lr / 10);
  r.lr_decay_iters = o.lr_decay_iters.value_or(o.max_iters);
  // SyncBatchNorm (--sync-bn, or automatic with more than one replica or --deterministic): every
  // BatchNorm synchronizes its training statistics over the wrapper's replicas.
  const std::int64_t replicas = static_cast<std::int64_t>(r.devices.size()) * dist.world;
  r.sync_bn = sync_batchnorm(o, replicas);
  task_ = r.model.gpt ? language_model_task() : classifier_task();
  task_->load(run);
  // In place, before wrapping (the replicas are clones); state_dict keys stay PyTorch's, so --init
  // above and --save / checkpoints are the same files either way.
  const std::int64_t batchnorms = count_batchnorms(*run.model);
  if (r.sync_bn && batchnorms > 0) nn::convert_sync_batchnorm(run.model);
  r.zero_scatter = o.zero && dist.world > 1 && r.devices.size() == 1 &&
                   o.grad_compression == "none" && !o.deterministic;
  run.fingerprint = flags_fingerprint(o, r);
  const RankData data = task_->rank_data();
  run.guards.check_same_setup(run.fingerprint, data.train, data.val, data.classes,
                              r.devices.size());
  task_->check_setup(run);

  // --comm-overlap, --bucket-cap-mb, --grad-compression (PyTorch's int(bucket_cap_mb * 2^20)).
  parallel::ReducerOptions reducer;
  reducer.overlap = o.comm_overlap;
  reducer.bucket_cap_bytes =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(o.bucket_cap_mb * 1024.0 * 1024.0));
  reducer.compression =
      o.grad_compression == "bf16" ? dist::WireFormat::BFloat16 : dist::WireFormat::Native;
  if (dist.group) {
    parallel::DistributedDataParallelOptions ddp_options;
    ddp_options.device_ids = r.devices;
    ddp_options.deterministic = o.deterministic;
    ddp_options.reducer = reducer;
    // --zero: the buckets are reduce-scattered (each rank receives the sums of its shard only)
    // where nothing needs the whole gradient (r.zero_scatter); otherwise they are all-reduced as
    // without --zero (docs/design.md, ZeRO-1).
    ddp_options.reducer.scatter = r.zero_scatter;
    ddp_options.seed = o.data.seed;
    run.dp =
        std::make_unique<parallel::DistributedDataParallel>(run.model, dist.group, ddp_options);
  } else {
    parallel::DataParallelOptions dp_options;
    dp_options.deterministic = o.deterministic;
    dp_options.reducer = reducer;
    dp_options.seed = o.data.seed;
    run.dp =
        std::make_unique<parallel::DataParallel>(run.model, r.devices, std::nullopt, dp_options);
  }
  setup_optimizer();
  // A checkpoint: the weights and up to two optimizer slots per weight (Adam's moments).
  const std::uint64_t weights = weights_file_bytes(*run.model);
  run.guards.check_output_space(weights,
                                weights * (r.optimizer == "sgd" && o.momentum == 0 ? 1 : 3));
  run.guards.lock_checkpoint_dir();
  if (o.resume) resume_from_checkpoint(run, *task_);
  // --cuda-graphs: every step through the graphed step (replays once the shape is static; the last
  // partial batch eagerly). Resuming across eager and graphed runs is allowed (same math), so the
  // flag is not part of the fingerprint.
  if (o.cuda_graphs)
    run.graph_step = std::make_unique<parallel::CUDAGraphStep>(*run.dp, run.optimizer);

  run.progress = std::make_unique<Progress>(run.out, Progress::mode_for_stdout(o.quiet), o.epochs);
  print_header(batchnorms);
  if (!o.metrics.empty() && dist.is_main())  // only rank 0 writes files
    run.metrics = std::make_unique<MetricsLog>(
        o.metrics, o.resume ? std::optional<std::int64_t>(task_->units_done(run)) : std::nullopt,
        task_->unit());
}

}  // namespace lockstep::app
