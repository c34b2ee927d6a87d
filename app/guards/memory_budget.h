// The memory a training run needs, checked before it allocates (issue 23): a model that did not
// fit passed a check that counted two copies of its weights against the machine's RAM, then
// thrashed and took the host down (OOM killer, status 137, no message). The estimate counts the
// weights (CPU replicas read the master's in place), every replica's gradients and the reduced
// ones, the optimizer state (--zero: this rank's shard), and the activations of one batch (kept
// for backward, and their gradients) plus one evaluation chunk and 144 MiB per kernel thread
// (OpenBLAS's buffer, the stack), against the memory actually available: the smallest of
// MemAvailable, the cgroup's limit less its usage, and `ulimit -v` less this process's size.
// Evaluation (validation, `lockstep eval`) runs in chunks whose activations stay under 256 MiB.
// Every command checks before it allocates (issue 39): `train` for every model kind from its spec
// (layer lists and resnet20 too, before they are built), `eval` and `generate` their weights, the
// --weights file and one chunk's activations (check_inference_memory). The limits are the
// process's own: its cgroup's (v2, and v1's memory controller), each ancestor group's too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/data_source.h"
#include "model/model_spec.h"
#include "cli/options.h"

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

/// resnet20's need for samples `sample` ([C, H, W]) from its shape alone: its parameters and,
/// walked in its forward's order, what backward keeps (3 of the stem's output's size, 7 per
/// BasicBlock of its output's size, 9 with a projection, then the pooled values and logits).
MemoryNeed resnet20_memory_need(const std::vector<std::int64_t>& sample);

/// Any model's need for `data` (already shaped by shape_for_model) from its spec alone, before
/// it is built: an mlp from its widths, resnet20 as above, a layer list from its arguments
/// (parameter_count, and every layer's output: layer_output_shapes). gpt: models need their
/// vocabulary: gpt_memory_need.
MemoryNeed spec_memory_need(const ModelSpec& spec, const LoadedData& data);

/// "--model mlp:...", "--model LAYERS", "--model @FILE LAYERS" or "--model resnet20": the model in
/// memory messages.
std::string spec_name(const ModelSpec& spec);

/// ValueError naming `what`, `command` ("evaluation", "generation"), the estimate, its parts and
/// the memory available when running `need` without gradients does not fit: one copy of the
/// weights, the --weights file of `file_bytes` read and parsed (twice its size), the activations
/// of `rows` rows at a time and two threads' BLAS buffers. Called before the model is built.
void check_inference_memory(const std::string& what, const std::string& command,
                            const MemoryNeed& need, long double file_bytes, std::int64_t rows);

/// Rows per evaluation forward: as many as keep `need`'s activations under 256 MiB, from 1 to
/// 8192.
std::int64_t eval_chunk_rows(const MemoryNeed& need);

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
