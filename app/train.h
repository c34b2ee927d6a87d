// `lockstep train`: the training job behind the CLI, kept free of any command-line parsing so it
// can be called (and tested) as a plain function.
//
// Today the only workload is the reference one (examples/reference_classifier.cpp, itself the
// PyTorch reference program line for line): 1000x10 standard-normal features and labels in {0, 1}
// drawn from the default generator after manual_seed(seed), the first 800 rows for training and
// the last 200 for validation, a Linear(10,5)-ReLU-Linear(5,2) model wrapped in DataParallel over
// the chosen devices, CrossEntropyLoss, SGD, batches in row order (no shuffle, last partial batch
// kept). Real datasets arrive with a later issue as new TrainConfig fields.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::app {

/// Everything `lockstep train` needs to know. Defaults are those of the reference program, so a
/// default-constructed TrainConfig reproduces examples/reference_classifier exactly.
struct TrainConfig {
  /// Passes over the 800 training rows; >= 1.
  std::int64_t epochs = 10;
  /// Rows per training step; >= 1. The last batch of an epoch may be smaller (800 = 25 x 32).
  std::int64_t batch_size = 32;
  /// SGD learning rate; finite and >= 0 (torch.optim.SGD accepts 0).
  double lr = 0.01;
  /// Seed of the default generator, which draws the data and then the initial parameters.
  std::uint64_t seed = 0;
  /// Devices the model is replicated on (DataParallel's device_ids); empty: every GPU if any,
  /// otherwise one CPU device per usable core (parallel::default_devices()).
  std::vector<Device> devices;
  /// DataParallel's deterministic mode: bit-identical weights for any number of devices.
  bool deterministic = false;
};

/// What a finished run reports besides its printed lines.
struct TrainSummary {
  /// Mean cross-entropy over the 200 validation rows after each epoch, in epoch order.
  std::vector<double> val_losses;
};

/// Throws lockstep::ValueError naming the field and value when `config` is out of range (epochs
/// or batch_size < 1, lr negative or not finite). The CLI rejects such values before calling.
void validate(const TrainConfig& config);

/// The reference model: nn::Sequential{Linear(10, 5), ReLU, Linear(5, 2)}, so its parameters are
/// named as torch.nn.Sequential's: `0.weight` [5, 10], `0.bias` [5], `2.weight` [2, 5],
/// `2.bias` [2]. Weights and biases are drawn from the default generator (PyTorch's Linear init),
/// in that order, exactly as the reference program's fc1/fc2 module draws them.
std::shared_ptr<nn::Sequential> make_reference_model();

/// Runs the training job described by `config` — the model wrapped in parallel::DataParallel over
/// config.devices, trained through its reducer path (forward_backward: each replica's loss on its
/// own chunk, gradients all-reduced in buckets during backward) — and writes one line per epoch
/// to `out`:
///   `Epoch k, Validation Loss: x.xxxx` (k from 1, loss with printf's "%.4f"),
/// flushing after each line. Reseeds the default generator. Throws ValueError for an invalid
/// config (see validate()) and lets any other lockstep::Error from the engine propagate.
TrainSummary run_train(const TrainConfig& config, std::ostream& out);

}  // namespace lockstep::app
