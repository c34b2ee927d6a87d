// The memory a training run needs, checked before it allocates (issue 23): a model that did not
// fit passed a check that counted two copies of its weights against the machine's RAM, then
// thrashed and took the host down (OOM killer, status 137, no message). The estimate counts the
// weights (CPU replicas read the master's in place), every replica's gradients and the reduced
// ones, the optimizer state (--zero: this rank's shard), and the activations of one batch (kept
// for backward, and their gradients) plus one evaluation chunk and 144 MiB per kernel thread
// (OpenBLAS's buffer, the stack), against the memory actually available: the smallest of
// MemAvailable, the cgroup's limit less its usage, and `ulimit -v` less this process's size.
// Evaluation (validation, `lockstep eval`) runs in chunks whose activations stay under 256 MiB.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data_source.h"
#include "lockstep/nn/module.h"
#include "model_spec.h"
#include "options.h"

namespace lockstep::app {

/// Parameters and the float32 values one sample's forward keeps (every layer's output; resnet20:
/// what its blocks keep for backward).
struct MemoryNeed {
  long double params = 0.0L, activations_per_sample = 0.0L;
};

/// Memory this process may still use, and which limit that is ("MemAvailable", "the cgroup's
/// memory.max", "ulimit -v"); unset when none is known.
struct AvailableMemory {
  long double bytes = 0.0L;
  std::string source;
};
std::optional<AvailableMemory> available_memory();

/// An mlp's need from its widths (each Linear's output and its activation's).
MemoryNeed mlp_memory_need(const MlpSpec& spec);

/// A gpt: model's need from its spec, before it is built: nanoGPT's parameters (wte tied to
/// lm_head, wpe, 12 C² a block; biases and LayerNorms left out) and, a window of `block` tokens,
/// about 18 C values a token a block (LayerNorms, qkv, the attention's output, projections, the
/// MLP's 4 C twice, residuals) plus the logits and their softmax (2 V a token). An estimate.
MemoryNeed gpt_memory_need(const GptSpec& spec, std::int64_t vocab_size);

/// State tensors the optimizer keeps per parameter: sgd 0 (1 with momentum), adam/adamw 2.
int optimizer_state_slots(const std::string& optimizer, double momentum);

/// A built model's need: its parameters, and the activations of one sample's eval-mode, no-grad
/// forward (run on 2 samples): for a chain of layers (nn::Sequential: layer lists) every child's
/// output; for nn::ResNet (resnet20) an estimate from its pieces' outputs, 3 for the stem and per
/// BasicBlock the 7 tensors of its output's size that backward keeps (9 with a projection). Other
/// models count their parameters only.
MemoryNeed model_memory_need(nn::Module& model, const LoadedData& data);

/// Rows per evaluation forward: as many as keep `need`'s activations under 256 MiB, from 1 to
/// 8192.
std::int64_t eval_chunk_rows(const MemoryNeed& need);

/// The run's check, made twice by `lockstep train`: with `model` null, before the model is built,
/// for an mlp (from its widths: an absurd one is refused before it is allocated); with the built
/// `model`, for any other model (measured). `replicas`: the devices of this process; `world`: the
/// job's ranks (with --zero each keeps 1/world of the optimizer state, zero_state_shards).
/// Returns the need (zero when this call had nothing to check), for eval_chunk_rows.
MemoryNeed check_run_memory(const TrainOptions& o, const ModelSpec& spec, const LoadedData& data,
                            std::int64_t replicas, int world, nn::Module* model);

/// How many ranks share the optimizer state: `world` with --zero across ranks
/// (ZeroRedundancyOptimizer), else 1.
int zero_state_shards(const TrainOptions& o, int world);

/// ValueError naming `what` (the --model), the estimate and its parts, the memory available and
/// its source, when training `need` on `replicas` devices with `optimizer_slots` state tensors per
/// parameter, of which this rank keeps 1/`state_shards` (--zero), and batches of `batch` does not
/// fit; the fix it suggests includes --zero on a job of `world` > 1 ranks without it whose
/// optimizer has state; `note` is appended (the default-model note).
void check_training_memory(const std::string& what, const MemoryNeed& need, std::int64_t replicas,
                           int optimizer_slots, int state_shards, int world, std::int64_t batch,
                           const std::string& note);

}  // namespace lockstep::app
