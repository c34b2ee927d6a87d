// `lockstep train`: the flag combinations refused before training, and the
// BatchNorm mode (--sync-bn / --no-sync-bn) a run resolves (see trainer.h).
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "message_text.h"
#include "trainer.h"

namespace lockstep::app {

std::string resolved_optimizer(const TrainOptions& o) {
  return o.model.spec.rfind("gpt:", 0) == 0 && !o.optimizer_given ? "adamw" : o.optimizer;
}

void check_combinations(const TrainOptions& o) {
  const std::string optimizer = resolved_optimizer(o);
  if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw")
    throw ValueError("--optimizer: expected sgd, adam or adamw, got '" + optimizer + "'");
  if (optimizer != "sgd" && !o.sgd_flags_given.empty())
    throw ValueError(o.sgd_flags_given.front() + " applies to --optimizer sgd only (not " +
                     optimizer + ")");
  if (optimizer == "sgd" && !o.adam_flags_given.empty())
    throw ValueError(o.adam_flags_given.front() + " applies to --optimizer adam and adamw only");
  if (o.optimizer == "sgd" && o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    throw ValueError(
        "--nesterov needs --momentum > 0 and --dampening 0 (as PyTorch's SGD), got "
        "--momentum " +
        typed_number(o.momentum) + " --dampening " + typed_number(o.dampening));
  if (o.resume && !o.init.empty())
    throw ValueError(
        "--resume and --init cannot be used together (the checkpoint holds the "
        "parameters to start from)");
  if (o.resume && o.checkpoint_dir.empty())
    throw ValueError("--resume needs --checkpoint-dir DIR (where the checkpoints are)");
  if (o.grad_compression != "none" && o.deterministic)
    throw ValueError("--grad-compression " + o.grad_compression +
                     " cannot be used with --deterministic (its results are bit-identical to "
                     "one device's; compressed gradients are not)");
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
    else if (o.grad_compression != "none")
      flag =
          "--grad-compression " + o.grad_compression + " (compressed reductions are not captured)";
    else if (o.model.dropout > 0)
      flag = "--dropout (a captured mask would be repeated by every replay)";
    if (!flag.empty()) throw ValueError("--cuda-graphs cannot be used with " + flag);
  }
}

void check_cuda_graphs_devices(const TrainOptions& o, const std::vector<Device>& devices,
                               bool distributed) {
  if (!o.cuda_graphs) return;
  if (distributed)
    throw ValueError(
        "--cuda-graphs is not supported across processes (--backend nccl / mpirun): "
        "DistributedDataParallel's step is not captured; train one process on one GPU");
  const std::string list = device_list(devices);
  if (devices.size() == 1 && devices.front().is_cuda()) return;
  std::string why =
      "--cuda-graphs needs training on exactly one GPU (--devices cuda:K); this run "
      "trains on " +
      list;
  if (!cuda::is_available()) why += " (no usable GPU: " + cuda::unavailable_reason() + ")";
  throw ValueError(why);
}

bool sync_batchnorm(const TrainOptions& o, std::int64_t replicas) {
  if (o.sync_bn) return *o.sync_bn;
  return replicas > 1 || o.deterministic;
}

std::string batchnorm_line(const TrainOptions& o, bool sync, std::int64_t layers,
                           std::size_t devices, int world) {
  if (layers == 0) return "";
  const std::int64_t replicas = static_cast<std::int64_t>(devices) * world;
  auto count = [](std::int64_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  std::string over = world == 1 ? count(static_cast<std::int64_t>(devices), "device")
                     : devices == 1
                         ? count(world, "rank")
                         : count(replicas, "replica") + ", " + count(world, "rank") + " x " +
                               count(static_cast<std::int64_t>(devices), "device");
  const std::string n = count(layers, "layer");
  if (sync) {
    std::string why;
    if (o.deterministic)
      why =
          "statistics of the whole global batch, bit-identical for every device count: "
          "--deterministic";
    else if (replicas > 1)
      why = "statistics of the whole global batch";
    else
      why = "the whole batch's statistics, the same as BatchNorm on one device";
    return "batchnorm: SyncBatchNorm over " + over + " (" + n + "; " + why + ")";
  }
  if (replicas > 1)
    return "batchnorm: BatchNorm per device over " + over + " (" + n +
           "; --no-sync-bn: each device normalizes its own chunk, as PyTorch's DataParallel and "
           "DistributedDataParallel)";
  return "batchnorm: BatchNorm on " + over + " (" + n + "; the whole batch's statistics" +
         (o.sync_bn ? "; --no-sync-bn" : "") + ")";
}

void check_shards_per_rank(const TrainOptions& o, std::int64_t samples, int world,
                           std::int64_t shard_size) {
  auto refuse = [&](std::int64_t batch, const std::string& which) {
    const std::int64_t shards = (batch + shard_size - 1) / shard_size;
    if (shards >= world) return;
    throw ValueError(
        "--deterministic with SyncBatchNorm over " + std::to_string(world) + " ranks: " + which +
        " of " + std::to_string(batch) + " samples makes " + std::to_string(shards) + " shard" +
        (shards == 1 ? "" : "s") + " of " + std::to_string(shard_size) +
        ", fewer than the ranks, and every rank needs a shard in "
        "every step (its collectives must meet every rank); give every batch at least " +
        std::to_string(static_cast<std::int64_t>(world - 1) * shard_size + 1) +
        " samples (--batch-size, and the epoch's last batch: the training rows modulo "
        "--batch-size), run fewer ranks, or leave --deterministic off");
  };
  if (samples >= o.batch_size) refuse(o.batch_size, "--batch-size");
  if (samples % o.batch_size != 0) refuse(samples % o.batch_size, "the last batch of each epoch");
}

}  // namespace lockstep::app
