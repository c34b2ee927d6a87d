// What `lockstep train` reports about each epoch: the per-epoch line, the final summary line and
// the --metrics JSON-lines file.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/device.h"

namespace lockstep::app {

/// One finished epoch.
struct EpochStats {
  /// 1-based epoch number and the total epochs of the run.
  std::int64_t epoch = 0, epochs = 0;
  /// Mean cross-entropy over the epoch's training samples (the per-batch mean losses weighted by
  /// batch size).
  double train_loss = 0.0;
  /// Mean cross-entropy and accuracy (fraction of argmax = label) over the validation rows;
  /// unset when validation is off.
  std::optional<double> val_loss, val_accuracy;
  /// Training samples / training seconds (validation excluded), and the epoch's wall time in
  /// seconds (validation included).
  double samples_per_second = 0.0, seconds = 0.0;
};

/// "epoch 3/10 train_loss 0.4123 val_loss 0.4410 val_acc 0.8421 samples/s 51234" (losses and
/// accuracy with 4 decimals, samples/s rounded to an integer); without validation the two val
/// values read "n/a".
std::string epoch_line(const EpochStats& stats);

/// "done: 10 epochs, val_loss 0.3312 val_acc 0.8812, 41.2 s, devices=cpu:0,cpu:1 world_size=1"
/// ("n/a" for the val values without validation; seconds with one decimal).
std::string summary_line(std::int64_t epochs, std::optional<double> val_loss,
                         std::optional<double> val_accuracy, double seconds,
                         const std::vector<Device>& devices, int world_size);

/// One evaluation of a gpt: model (train/language_model_task.cpp).
struct IterStats {
  /// Optimizer steps done and --max-iters.
  std::int64_t iter = 0, max_iters = 0;
  /// estimate_loss of the training and validation parts (val unset without validation).
  double train_loss = 0.0;
  std::optional<double> val_loss;
  /// Training tokens (batch x block per step) / training seconds since the previous
  /// evaluation, and the lr of the last step.
  double tokens_per_second = 0.0, lr = 0.0;
};

/// "iter 250/5000 train_loss 1.9812 val_loss 2.0511 lr 0.000994 tokens/s 9123".
std::string iter_line(const IterStats& stats);

/// "done: 5000 iterations, val_loss 1.4403, 512.3 s, tokens/s 9870, devices=cpu:0 world_size=1"
/// (tokens/s over the whole run's training steps).
std::string iter_summary_line(std::int64_t iters, std::optional<double> val_loss, double seconds,
                              double tokens_per_second, const std::vector<Device>& devices,
                              int world_size);

/// The --metrics file: one JSON object per epoch (nlohmann-json), keys `epoch`, `train_loss`,
/// `val_loss`, `val_accuracy` (null without validation), `samples_per_second`, `seconds`,
/// `devices` (list of device names of this process) and `world_size` (number of processes).
class MetricsLog {
 public:
  /// No file is touched until the first append(). `resumed_epochs`: unset for a fresh run (the
  /// first append replaces any existing file); set to the epochs (iterations, with `key`
  /// "iter") completed by the checkpoint a run resumes from, the first append keeps the
  /// existing lines whose `key` is <= it (dropping lines the resumed run will redo) and appends
  /// after them.
  MetricsLog(std::string path, std::optional<std::int64_t> resumed_epochs,
             std::string key = "epoch");
  /// Writes one line and flushes it. IoError naming the file when it cannot be written.
  void append(const EpochStats& stats, const std::vector<Device>& devices, int world_size);
  /// For gpt: models: keys iter, train_loss, val_loss (null without validation),
  /// tokens_per_second, lr, devices, world_size.
  void append(const IterStats& stats, const std::vector<Device>& devices, int world_size);

 private:
  void start();
  /// Adds `devices` and `world_size` to `j` and appends it as one line.
  void write_line(nlohmann::json& j, const std::vector<Device>& devices, int world_size);
  std::string path_;
  std::optional<std::int64_t> resumed_epochs_;
  std::string key_;
  bool started_ = false;
};

}  // namespace lockstep::app
