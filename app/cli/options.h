// The values `lockstep train` and `lockstep eval` run with: plain structs filled in by the
// command line (cli.h) and read by the jobs (train.h, eval.h). Defaults are the documented ones
// (issue 4's flag table); a field that is std::optional is unset when the flag was not given and
// its default depends on other flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/device.h"

namespace lockstep::app {

/// Where the data comes from and how it is split (--data, --label-column, --val-fraction).
struct DataOptions {
  /// `synthetic` | `fashion-mnist` | `fashion-mnist:DIR` | `idx:TI,TL[,VI,VL]` |
  /// `csv:TRAIN[,VAL]` (see data_source.h).
  std::string spec = "synthetic";
  /// CSV label column, 0-based; negative counts from the end (-1: the last column).
  std::int64_t label_column = -1;
  /// Fraction of the rows held out at the end for validation when the data has no validation
  /// part of its own (unset: 0.2). 0 turns validation off; with data that has a validation part,
  /// only 0 (validation off) is accepted.
  std::optional<double> val_fraction;
  /// Seed of the default generator, which draws the synthetic data (and then the model).
  std::uint64_t seed = 0;
};

/// The model (--model, --activation, --dropout).
struct ModelOptions {
  /// `mlp:IN,H1,...,OUT`; empty: `mlp:IN,5,C` for synthetic data, `mlp:IN,256,C` otherwise,
  /// IN and C taken from the data.
  std::string spec;
  /// relu | tanh | sigmoid | gelu
  std::string activation = "relu";
  /// Dropout probability after each hidden activation; 0: no Dropout modules at all.
  double dropout = 0.0;
};

/// How the process takes part in a multi-process job (--backend, --timeout, --log-all-ranks).
struct DistOptions {
  /// threads | mpi | nccl; unset: mpi when started by an MPI launcher (mpirun), else threads.
  std::optional<std::string> backend;
  /// Seconds a collective may wait for the other ranks before the job fails (exit 4).
  double timeout = 60.0;
  /// Every rank prints its progress and summary (default: rank 0 only; errors always print).
  bool log_all_ranks = false;
};

/// Everything `lockstep train` needs.
struct TrainOptions {
  DistOptions dist;
  DataOptions data;
  ModelOptions model;
  /// sgd | adam | adamw
  std::string optimizer = "sgd";
  /// Unset: 0.01 for sgd, 0.001 for adam/adamw.
  std::optional<double> lr;
  double momentum = 0.0;   // sgd only
  double dampening = 0.0;  // sgd only
  bool nesterov = false;   // sgd only
  /// Unset: 0 for sgd and adam, 0.01 for adamw.
  std::optional<double> weight_decay;
  double beta1 = 0.9, beta2 = 0.999;  // adam/adamw only
  double eps = 1e-8;                  // adam/adamw only
  /// Which of the optimizer-specific flags were given (to refuse them for the other optimizers).
  std::vector<std::string> sgd_flags_given, adam_flags_given;
  /// constant | step:EVERY:GAMMA | cosine
  std::string lr_schedule = "constant";
  /// Max total gradient norm (clip_grad_norm_); unset: no clipping.
  std::optional<double> clip_grad_norm;
  /// Batches whose gradients are summed before one optimizer step.
  std::int64_t accumulate_steps = 1;
  /// Global batch size (over all devices).
  std::int64_t batch_size = 32;
  /// Total epochs (a resumed run continues up to this many).
  std::int64_t epochs = 10;
  /// gpt: models train by iterations (train/language_model_task.cpp): the run's length in
  /// optimizer steps, an evaluation (nanoGPT's estimate_loss over eval_iters batches of each
  /// part) and a checkpoint every eval_interval steps and at the end.
  std::int64_t max_iters = 5000, eval_interval = 250, eval_iters = 200;
  /// --lr-schedule cosine with gpt: models: nanoGPT's get_lr (optim::WarmupCosineLR) stepped per
  /// iteration; min_lr unset: lr / 10; lr_decay_iters unset: max_iters.
  std::int64_t warmup_iters = 0;
  std::optional<double> min_lr;
  std::optional<std::int64_t> lr_decay_iters;
  /// Which flags of one training kind were given (refused with the other kind of model):
  /// --epochs, --no-shuffle, ... (epoch-based models) and --max-iters, --eval-interval, ... (gpt:).
  std::vector<std::string> epoch_flags_given, iteration_flags_given;
  /// Whether --optimizer was given (gpt: models default to adamw, nanoGPT's).
  bool optimizer_given = false;
  /// Batches in file order (last partial batch kept) instead of a fresh permutation each epoch.
  bool no_shuffle = false;
  /// DataParallel's deterministic mode: bit-identical weights for any device count.
  bool deterministic = false;
  /// --sync-bn (true): every BatchNorm of the model becomes a SyncBatchNorm
  /// (nn::convert_sync_batchnorm before wrapping); --no-sync-bn (false): PyTorch's per-device
  /// BatchNorm. Unset (automatic): SyncBatchNorm when more than one device or rank trains or
  /// with --deterministic, plain BatchNorm otherwise (one device: the two are the same).
  std::optional<bool> sync_bn;
  /// fp32 | bf16: bf16 runs each training step's forward and loss under an AutocastGuard
  /// (lockstep/ops/autocast.h: bf16 Linear layers, fp32 master weights and optimizer state) on
  /// every device, replica and rank; validation stays fp32.
  std::string precision = "fp32";
  /// --comm-overlap on|off: start each gradient bucket's reduction during backward, as soon as
  /// the bucket is ready (on), or every bucket's after backward (off); bit-identical results
  /// (parallel::ReducerOptions::overlap).
  bool comm_overlap = true;
  /// --bucket-cap-mb: gradient bucket capacity in MB of 2^20 bytes (DDP's bucket_cap_mb;
  /// parallel::ReducerOptions::bucket_cap_bytes = max(1, int(MB * 2^20))).
  double bucket_cap_mb = 25.0;
  /// --bucket-cap-mb was given: the run's header then says how many buckets it made
  /// (Trainer::buckets_line; without it the output stays the reference program's lines).
  bool bucket_cap_given = false;
  /// --grad-compression none | bf16: bf16 reduces every gradient bucket in bfloat16 (PyTorch's
  /// bf16_compress_hook; parallel::ReducerOptions::compression); refused with --deterministic.
  std::string grad_compression = "none";
  /// Capture each training step into a CUDA graph once the batch shape is static and replay it
  /// (parallel::CUDAGraphStep); one GPU only (refused otherwise, exit 2).
  bool cuda_graphs = false;
  /// --zero: ZeRO-1 across ranks (parallel::ZeroRedundancyOptimizer): each rank keeps the
  /// optimizer state of its shard of the parameters only. One process: the plain optimizer.
  bool zero = false;
  /// Empty: parallel::default_devices().
  std::vector<Device> devices;
  /// safetensors files: initial parameters, final parameters.
  std::string init, save;
  /// --torch-init: the initial parameters drawn as PyTorch draws them after
  /// torch.manual_seed(--seed) (model_spec.h, with_torch_init).
  bool torch_init = false;
  /// Where epoch checkpoints go; --resume continues from the newest one there.
  std::string checkpoint_dir;
  bool resume = false;
  /// JSON-lines metrics file.
  std::string metrics;
  bool quiet = false;
};

/// Everything `lockstep generate` needs (nanoGPT's sample.py).
struct GenerateOptions {
  /// safetensors weights of a gpt: model with its vocabulary in the metadata (lockstep train
  /// --save or a checkpoint).
  std::string weights;
  std::string prompt = "\n";
  std::int64_t max_new_tokens = 500;
  /// 0: greedy (argmax); otherwise logits / temperature.
  double temperature = 0.8;
  /// Sample among the top_k most likely tokens only; 0: all of them.
  std::int64_t top_k = 200;
  std::uint64_t seed = 1337;
};

/// Everything `lockstep eval` needs.
struct EvalOptions {
  DistOptions dist;
  DataOptions data;
  ModelOptions model;
  /// safetensors file with the model's state_dict.
  std::string weights;
};

}  // namespace lockstep::app
