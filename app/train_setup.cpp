// `lockstep train`: a run's setup (see trainer.h): flag defaults, devices, data, model,
// (Distributed)DataParallel, optimizer, scheduler, loader and output.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data_source.h"
#include "lockstep/lockstep.h"
#include "lr_schedule.h"
#include "memory_budget.h"
#include "message_text.h"
#include "metrics.h"
#include "model_spec.h"
#include "progress.h"
#include "trainer.h"
#include "weights.h"

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

// How many BatchNorm layers (BatchNorm1d / BatchNorm2d, synchronized or not) `m`'s tree holds.
std::int64_t count_batchnorms(const nn::Module& m) {
  std::int64_t n = dynamic_cast<const nn::BatchNormBase*>(&m) != nullptr ? 1 : 0;
  for (const auto& [name, child] : m.named_children())
    if (child) n += count_batchnorms(*child);
  return n;
}

}  // namespace

void Trainer::setup_optimizer() {
  // gpt: models: nanoGPT's configure_optimizers, weight decay on the >= 2-d tensors only.
  std::vector<optim::ParamGroup> groups =
      text_ ? optim::weight_decay_groups(*model_, r_.weight_decay)
            : std::vector<optim::ParamGroup>{{dp_->parameters(), std::nullopt}};
  // --zero across ranks: the state sharded over the ranks (the shard per rank, its local devices
  // share it), partitioned by the reducer's buckets of the master parameters. One process: the
  // plain optimizer, which is what ZeRO over one rank computes.
  if (o_.zero && dist_.group && dist_.world > 1)
    optimizer_ = std::make_shared<parallel::ZeroRedundancyOptimizer>(
        std::move(groups), optimizer_class(o_, r_), dist_.group, parallel::zero_layout(*dp_));
  else
    optimizer_ = optimizer_class(o_, r_)(std::move(groups));
  if (text_ && r_.schedule.kind == LrSchedule::Kind::Cosine)  // nanoGPT's get_lr, per iteration
    scheduler_ = std::make_unique<optim::WarmupCosineLR>(*optimizer_, o_.warmup_iters,
                                                         r_.lr_decay_iters, r_.min_lr);
  else if (!text_)
    scheduler_ = make_scheduler(r_.schedule, *optimizer_, o_.epochs);
}

std::string Trainer::zero_line() const {
  const auto* zero = dynamic_cast<const parallel::ZeroRedundancyOptimizer*>(optimizer_.get());
  if (!zero || o_.quiet) return "";
  std::int64_t mine = 0, total = 0;
  for (const parallel::ZeroPiece& p : zero->shard()) mine += p.hi - p.lo;
  for (const Tensor& p : zero->params()) total += p.numel();
  return "zero: this rank holds " + std::to_string(zero->state_bytes()) +
         " bytes of optimizer state (the state of " + std::to_string(mine) + " of " +
         std::to_string(total) + " parameter elements, " + std::to_string(dist_.world) +
         " ranks)\n";
}

std::string Trainer::buckets_line() const {
  const auto replicas = static_cast<std::int64_t>(r_.devices.size()) * dist_.world;
  if (!o_.bucket_cap_given || replicas == 1 || o_.deterministic || o_.quiet) return "";
  return "gradient buckets: " + std::to_string(dp_->gradient_buckets().size()) +
         " (--bucket-cap-mb " + typed_number(o_.bucket_cap_mb) + ")";
}

void Trainer::setup() {
  check_combinations(o_);
  check_outputs(o_);  // every rank, so that all refuse alike (only rank 0 writes the files)
  // Across ranks (one process per device is the usual layout) a rank uses one device unless
  // --devices gives it several; with --backend nccl it is the rank's GPU, cuda:(local rank).
  if (dist_.device && !o_.devices.empty() &&
      (o_.devices.size() != 1 || o_.devices.front() != *dist_.device)) {
    const std::string list = device_list(o_.devices);
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

  if (!o_.model.spec.empty()) r_.model = parse_model_spec(o_.model.spec);
  check_training_kind(o_, r_.model);
  // gpt: models default to nanoGPT's AdamW.
  r_.optimizer = resolved_optimizer(o_);
  r_.lr = o_.lr.value_or(r_.optimizer == "sgd" ? 0.01 : 0.001);
  r_.weight_decay = o_.weight_decay.value_or(r_.optimizer == "adamw" ? 0.01 : 0.0);
  r_.schedule = parse_lr_schedule(o_.lr_schedule);
  r_.min_lr = o_.min_lr.value_or(r_.lr / 10);
  r_.lr_decay_iters = o_.lr_decay_iters.value_or(o_.max_iters);
  const auto replicas_here = static_cast<std::int64_t>(r_.devices.size());
  if (r_.model.gpt) {
    setup_text_model(replicas_here);
  } else {
    // Data first, then the model: with synthetic data both come from the default generator in
    // this order, as in the reference program.
    manual_seed(o_.data.seed);
    data_ = load_data(o_.data);
    if (o_.model.spec.empty())
      r_.model.mlp = default_mlp_spec(data_.synthetic, data_.features, data_.classes);
    shape_for_model(r_.model, data_);
    // Every model is checked from its spec, before it is allocated (memory_budget.h).
    r_.eval_rows =
        eval_chunk_rows(check_run_memory(o_, r_.model, data_, replicas_here, dist_.world));
    model_ = with_torch_init(o_.torch_init, o_.data.seed, [&] {
      return make_model(r_.model, o_.model, data_, /*copies=*/2,
                        o_.model.spec.empty()
                            ? default_mlp_note(data_.features, data_.classes, data_.train_name)
                            : "");
    });
    if (!o_.init.empty()) load_weights(*model_, o_.init, "--init");
  }
  // SyncBatchNorm (--sync-bn, or automatic with more than one replica or --deterministic): every
  // BatchNorm synchronizes its training statistics over the wrapper's replicas. In place, before
  // wrapping (the replicas are clones); state_dict keys stay PyTorch's, so --init above and
  // --save / checkpoints are the same files either way.
  const std::int64_t replicas = static_cast<std::int64_t>(r_.devices.size()) * dist_.world;
  const std::int64_t batchnorms = count_batchnorms(*model_);
  r_.sync_bn = sync_batchnorm(o_, replicas);
  if (batchnorms > 0 && !text_)
    check_batchnorm_batches(o_, r_.model, data_, r_.sync_bn,
                            static_cast<std::int64_t>(r_.devices.size()), dist_.world);
  if (r_.sync_bn && batchnorms > 0) nn::convert_sync_batchnorm(model_);
  r_.zero_scatter = o_.zero && dist_.world > 1 && r_.devices.size() == 1 &&
                    o_.grad_compression == "none" && !o_.deterministic;
  fingerprint_ = flags_fingerprint(o_, r_);
  if (dist_.world > 1) check_same_setup_on_every_rank();
  if (r_.sync_bn && batchnorms > 0 && o_.deterministic && dist_.world > 1)
    check_shards_per_rank(o_, data_.train_x.size(0), dist_.world,
                          parallel::DataParallelOptions{}.shard_size);

  // --comm-overlap, --bucket-cap-mb, --grad-compression (PyTorch's int(bucket_cap_mb * 2^20)).
  parallel::ReducerOptions reducer;
  reducer.overlap = o_.comm_overlap;
  reducer.bucket_cap_bytes =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(o_.bucket_cap_mb * 1024.0 * 1024.0));
  reducer.compression =
      o_.grad_compression == "bf16" ? dist::WireFormat::BFloat16 : dist::WireFormat::Native;
  if (dist_.group) {
    parallel::DistributedDataParallelOptions ddp_options;
    ddp_options.device_ids = r_.devices;
    ddp_options.deterministic = o_.deterministic;
    ddp_options.reducer = reducer;
    // --zero: the buckets are reduce-scattered (each rank receives the sums of its shard only)
    // where nothing needs the whole gradient (r_.zero_scatter); otherwise they are all-reduced as
    // without --zero (docs/design.md, ZeRO-1).
    ddp_options.reducer.scatter = r_.zero_scatter;
    ddp_options.seed = o_.data.seed;
    dp_ = std::make_unique<parallel::DistributedDataParallel>(model_, dist_.group, ddp_options);
  } else {
    parallel::DataParallelOptions dp_options;
    dp_options.deterministic = o_.deterministic;
    dp_options.reducer = reducer;
    dp_options.seed = o_.data.seed;
    dp_ = std::make_unique<parallel::DataParallel>(model_, r_.devices, std::nullopt, dp_options);
  }
  setup_optimizer();
  // A checkpoint: the weights and up to two optimizer slots per weight (Adam's moments).
  const std::uint64_t weights = weights_file_bytes(*model_);
  check_output_space(o_, weights, weights * (r_.optimizer == "sgd" && o_.momentum == 0 ? 1 : 3));
  if (!o_.checkpoint_dir.empty() && dist_.is_main())  // one run at a time in the directory
    dir_lock_ = std::make_unique<CheckpointDirLock>(o_.checkpoint_dir, o_.resume);
  if (o_.resume) resume_from_checkpoint();
  // --cuda-graphs: every step through the graphed step (replays once the shape is static; the
  // last partial batch eagerly). Resuming across eager and graphed runs is allowed (same math),
  // so the flag is not part of the fingerprint.
  if (o_.cuda_graphs) graph_step_ = std::make_unique<parallel::CUDAGraphStep>(*dp_, optimizer_);

  if (!text_) {
    auto dataset = std::make_shared<data::TensorDataset>(data_.train_x, data_.train_y);
    loader_ = std::make_unique<data::DataLoader>(
        dataset, data::DataLoaderOptions{.batch_size = o_.batch_size,
                                         .shuffle = !o_.no_shuffle,
                                         .drop_last = false,
                                         .seed = o_.data.seed});
  }
  progress_ = std::make_unique<Progress>(out_, Progress::mode_for_stdout(o_.quiet), o_.epochs);
  // The run's header: which BatchNorm trains (models without BatchNorm print nothing here) and
  // (with --bucket-cap-mb) how many gradient buckets the reducer made.
  if (const std::string line =
          batchnorm_line(o_, r_.sync_bn, batchnorms, r_.devices.size(), dist_.world);
      !line.empty() && !o_.quiet)
    out_ << line << '\n' << std::flush;
  if (const std::string line = buckets_line(); !line.empty()) out_ << line << '\n' << std::flush;
  if (!o_.metrics.empty() && dist_.is_main())  // only rank 0 writes files
    metrics_ = std::make_unique<MetricsLog>(
        o_.metrics,
        o_.resume ? std::optional<std::int64_t>(text_ ? global_step_ : epochs_done_) : std::nullopt,
        text_ ? "iter" : "epoch");
}

void Trainer::clip_gradients() {
  if (!o_.clip_grad_norm) return;
  // With --zero's reduce-scatter each rank holds its shard's sums only: the norm comes from the
  // ranks' partial sums (ZeroRedundancyOptimizer::clip_grad_norm_, a collective).
  if (r_.zero_scatter)
    static_cast<parallel::ZeroRedundancyOptimizer&>(*optimizer_)
        .clip_grad_norm_(*o_.clip_grad_norm);
  else
    nn::utils::clip_grad_norm_(dp_->parameters(), *o_.clip_grad_norm);
}

}  // namespace lockstep::app
