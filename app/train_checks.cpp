// `lockstep train`: the flag combinations and output paths refused before training (see
// trainer.h).
#include <filesystem>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "trainer.h"

namespace lockstep::app {

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

void check_output_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw IoError(flag + " " + dir + ": not a directory");
}

}  // namespace lockstep::app
