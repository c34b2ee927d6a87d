// The checks `lockstep train` makes before training (train_checks.cpp), the flag checks of a
// training kind (check_training_kind, language_model_task.cpp) and the BatchNorm mode a run
// resolves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/options.h"
#include "data/data_source.h"
#include "lockstep/lockstep.h"
#include "model/model_spec.h"

namespace lockstep::app {

/// --sync-bn / --no-sync-bn as given, else automatic: SyncBatchNorm when `replicas` (devices ×
/// ranks) > 1 or with --deterministic.
bool sync_batchnorm(const TrainOptions& o, std::int64_t replicas);

/// The run's "batchnorm: ..." line for a model with `layers` BatchNorm layers (0: none, no line):
/// which mode trains and over how many devices / ranks.
std::string batchnorm_line(const TrainOptions& o, bool sync, std::int64_t layers,
                           std::size_t devices, int world);

/// Deterministic mode across ranks with SyncBatchNorm needs a shard on every rank in every step:
/// ValueError naming the batch (--batch-size, or the epoch's last one of `samples` rows) whose
/// shards (of `shard_size`) are fewer than the `world` ranks.
void check_shards_per_rank(const TrainOptions& o, std::int64_t samples, int world,
                           std::int64_t shard_size);

/// A BatchNorm in training normalises each group of samples (the global batch with SyncBatchNorm,
/// each device's chunk of it without) with the statistics of that group: a group of one sample
/// whose BatchNorm input holds one value per channel (BatchNorm1d after a Linear) cannot train
/// (PyTorch: "Expected more than 1 value per channel when training"). ValueError naming the layer,
/// --batch-size and the training rows when a batch of the epoch (each full one, or the last one:
/// the rows modulo --batch-size) makes such a group on `devices` devices per rank and `world`
/// ranks; checked before training, from the spec (no model needed).
void check_batchnorm_batches(const TrainOptions& o, const ModelSpec& spec, const LoadedData& data,
                             bool sync, std::int64_t devices, int world);

/// --optimizer, or adamw (nanoGPT's) for a gpt: model when it was not given.
std::string resolved_optimizer(const TrainOptions& o);

/// Refuses flag combinations that make no sense (ValueError naming the flags).
void check_combinations(const TrainOptions& o);

/// gpt: models (`gpt`) and the others take different flags and data: ValueError naming the flag
/// given to the wrong kind (--epochs with a gpt: model, --max-iters without one, ...), text data
/// without a gpt: model or a gpt: model without text data, sgd or a step: schedule with a gpt:
/// model (language_model_task.cpp).
void check_training_kind(const TrainOptions& o, const ModelSpec& model);

/// --cuda-graphs needs training on exactly one GPU in one process (ValueError naming what the run
/// trains on, and why there is no GPU when there is none).
void check_cuda_graphs_devices(const TrainOptions& o, const std::vector<Device>& devices,
                               bool distributed);

/// How many BatchNorm layers (BatchNorm1d / BatchNorm2d, synchronized or not) `m`'s tree holds.
std::int64_t count_batchnorms(const nn::Module& m);

}  // namespace lockstep::app
