// Training checkpoints of `lockstep train --checkpoint-dir DIR`: safetensors files holding the
// model's state_dict under its own names, the optimizer's under `optimizer.` + its names, the LR
// scheduler's under `scheduler.` + its names, and the training position in `__metadata__`
// (strings). Every file is written atomically (temporary file, fsync, rename), so a file with a
// checkpoint name is always complete.
//
// Names: `epoch-0003.safetensors` after epoch 3 ended; `epoch-0004-batch-000120.safetensors`
// when a run was interrupted (SIGINT/SIGTERM) after batch 120 of epoch 4. --resume continues
// from the newest one, ordered by (complete epochs, batches into the next epoch). gpt: models
// train by iterations: `iter-000250.safetensors` after step 250 (at an evaluation or a signal),
// ordered by the step.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "lockstep/io/safetensors.h"
#include "lockstep/core/state_dict.h"

namespace lockstep::app {

struct DistContext;

/// Where training stands, as stored in a checkpoint's metadata.
struct TrainingPosition {
  /// Epochs completed, and batches of epoch `epochs_done + 1` already trained (0 at an epoch
  /// end; a multiple of --accumulate-steps otherwise).
  std::int64_t epochs_done = 0, batch_in_epoch = 0;
  /// Optimizer steps taken since the start of training.
  std::int64_t global_step = 0;
  /// parallel::DataParallel::step_count() (keys the dropout masks).
  std::uint64_t dp_step_count = 0;
  /// Sum over the current epoch's trained batches of (mean batch loss x batch size), and those
  /// batches' samples: the epoch's train_loss continues from them after a mid-epoch resume.
  double epoch_loss_sum = 0.0;
  std::int64_t epoch_samples = 0;
  /// Default generator state (seed, offset in 32-bit words) when the checkpoint was written.
  std::uint64_t generator_seed = 0, generator_offset = 0;
  /// --seed.
  std::uint64_t seed = 0;
  /// The flags that shape the trajectory, one `--flag=value` per line (see train/resume.cpp).
  std::string flags;
  /// A run by iterations (gpt: models; metadata "unit": "iteration"): global_step is the
  /// position, the file is iter-NNNNNN.safetensors.
  bool by_iteration = false;
  /// More metadata written as given and read back (every key not above): a gpt: model's
  /// vocabulary and model (text_data.h, gpt_spec.h) and its window generator's offset.
  std::map<std::string, std::string> extra;
};

/// Everything a checkpoint holds.
struct Checkpoint {
  StateDict model, optimizer, scheduler;
  TrainingPosition position;
  std::string path;
};

/// "epoch-0003.safetensors" (epoch end), "epoch-0004-batch-000120.safetensors" (mid-epoch) or
/// "iter-000250.safetensors" (by_iteration).
std::string checkpoint_filename(const TrainingPosition& position);

/// Writes DIR/checkpoint_filename(position) atomically (creating DIR when missing) and returns
/// its path. IoError naming the path when DIR cannot be created or the file written.
std::string write_checkpoint(const std::string& dir, const StateDict& model,
                             const StateDict& optimizer, const StateDict& scheduler,
                             const TrainingPosition& position);

/// The newest checkpoint in `dir` by (complete epochs, batches into the next epoch), or by
/// iteration for iter-NNNNNN files, ignoring
/// temporary files (io::is_temporary_file) and every other name; unset when there is none.
/// IoError naming `dir` when it cannot be listed.
std::optional<std::string> find_latest_checkpoint(const std::string& dir);

/// Whether `file` is a lockstep checkpoint (its metadata "format"), e.g. one given where a
/// weights file is expected.
bool is_checkpoint(const safetensors::File& file);

/// Reads a checkpoint. IoError (unreadable), DataError (malformed safetensors, or a missing or
/// malformed metadata entry, naming the file and the key).
Checkpoint read_checkpoint(const std::string& path);

/// read_checkpoint of a file's bytes (`path` names it in errors and in Checkpoint::path).
Checkpoint parse_checkpoint(std::string_view bytes, const std::string& path);

/// --resume in a job of several ranks: rank 0 alone looks for the newest checkpoint in `dir`
/// (find_latest_checkpoint) and reads it; its bytes go to every rank by broadcast, so the ranks
/// need no shared file system (only rank 0's host holds checkpoints: rank 0 writes them). A
/// failure on rank 0 (no checkpoint: ValueError; IoError; DataError) is thrown on every rank
/// with rank 0's message. Without a group, read_checkpoint of the newest file.
Checkpoint read_latest_checkpoint_on_rank0(const DistContext& dist, const std::string& dir);

}  // namespace lockstep::app
