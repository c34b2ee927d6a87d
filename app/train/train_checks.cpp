// `lockstep train`: the flag combinations refused before training, and the
// BatchNorm mode (--sync-bn / --no-sync-bn) a run resolves (see checks.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/lockstep.h"
#include "cli/message_text.h"
#include "train/checks.h"

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
  if (o.zero && o.cuda_graphs)
    throw ValueError(
        "--zero cannot be used with --cuda-graphs (ZeRO shards the optimizer state across "
        "ranks; a captured step runs in one process)");
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

std::int64_t count_batchnorms(const nn::Module& m) {
  std::int64_t n = dynamic_cast<const nn::BatchNormBase*>(&m) != nullptr ? 1 : 0;
  for (const auto& [name, child] : m.named_children())
    if (child) n += count_batchnorms(*child);
  return n;
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

void check_batchnorm_batches(const TrainOptions& o, const ModelSpec& spec, const LoadedData& data,
                             bool sync, std::int64_t devices, int world) {
  const std::vector<std::int64_t> shape = data.train_x.shape().vec();
  const std::vector<long double> sample(shape.begin() + 1, shape.end());
  // The first BatchNorm whose input holds one value per channel in each sample.
  std::string layer;
  if (!spec.network.empty() && sample.size() == 3) {  // resnet20: smallest after two stride-2 stages
    long double h = sample[1], w = sample[2];
    for (int i = 0; i < 2; ++i)
      h = std::floor((h - 1.0L) / 2.0L) + 1.0L, w = std::floor((w - 1.0L) / 2.0L) + 1.0L;
    if (h * w == 1.0L) layer = spec.where + "'s layer3 BatchNorm2d";
  } else if (!spec.layers.empty()) {
    const auto outs = layer_output_shapes(spec.layers, spec.where, sample);
    for (std::size_t i = 0; i < spec.layers.size() && i <= outs.size() && layer.empty(); ++i) {
      if (spec.layers[i].name != "BatchNorm1d" && spec.layers[i].name != "BatchNorm2d") continue;
      const std::vector<long double>& in = i == 0 ? sample : outs[i - 1];
      long double per_channel = 1.0L;
      for (std::size_t d = 1; d < in.size(); ++d) per_channel *= in[d];
      if (per_channel == 1.0L) layer = spec.where + " layer " + spec.layers[i].text;
    }
  }
  if (layer.empty()) return;
  const std::int64_t rows = data.train_x.size(0), b = o.batch_size;
  std::vector<std::pair<std::int64_t, std::string>> batches{
      {std::min(b, rows), rows <= b ? "the epoch's only batch" : "each full batch"}};
  if (rows > b && rows % b != 0)
    batches.emplace_back(rows % b, "the last batch of each epoch (the rows modulo --batch-size)");
  for (const auto& [n, which] : batches) {
    std::int64_t smallest = n;
    if (!sync)
      for (const auto& [rs, rank_part] : parallel::split_batch(n, world))
        for (const auto& [ds, device_part] : parallel::split_batch(rank_part, devices))
          if (device_part > 0) smallest = std::min(smallest, device_part);
    if (smallest != 1) continue;
    throw ValueError(
        "--batch-size " + std::to_string(b) + " with " + std::to_string(rows) +
        " training rows: " + which + " holds " + std::to_string(n) +
        (n == 1 ? " sample" : " samples, one device's share 1 sample (per-device BatchNorm)") +
        ", and " + layer +
        " would normalise it with the statistics of a single value per channel (PyTorch: "
        "\"Expected more than 1 value per channel when training\"); choose a --batch-size that "
        "leaves every batch at least 2 samples" +
        (sync ? std::string() : " per device (or --sync-bn)"));
  }
}

}  // namespace lockstep::app
