// What `lockstep train` reports about each epoch: the per-epoch line, the final summary line and
// the --metrics JSON-lines file.
#pragma once

#include <cstdint>
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

/// "cpu:0,cpu:1".
/// The --metrics file: one JSON object per epoch (nlohmann-json), keys `epoch`, `train_loss`,
/// `val_loss`, `val_accuracy` (null without validation), `samples_per_second`, `seconds`,
/// `devices` (list of device names of this process) and `world_size` (number of processes).
class MetricsLog {
 public:
  /// No file is touched until the first append(). `resumed_epochs`: unset for a fresh run (the
  /// first append replaces any existing file); set to the epochs completed by the checkpoint a
  /// run resumes from, the first append keeps the existing lines for epochs <= it (dropping
  /// lines of epochs the resumed run will redo) and appends after them.
  MetricsLog(std::string path, std::optional<std::int64_t> resumed_epochs);
  /// Writes one line and flushes it. IoError naming the file when it cannot be written.
  void append(const EpochStats& stats, const std::vector<Device>& devices, int world_size);

 private:
  void start();
  std::string path_;
  std::optional<std::int64_t> resumed_epochs_;
  bool started_ = false;
};

}  // namespace lockstep::app
