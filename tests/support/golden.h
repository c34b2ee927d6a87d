// Loader for PyTorch golden trajectories (tests/data/*.json, format in tests/data/GOLDEN.md).
#pragma once

#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace lockstep::testing {

struct Golden {
  std::string name;
  std::vector<std::int64_t> sizes;
  std::string activation;
  std::int64_t n_train = 0, n_val = 0, batch_size = 0, epochs = 0;
  std::string optimizer;  // sgd | adam | adamw
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0, beta1 = 0.9, beta2 = 0.999,
         eps = 1e-8;
  bool nesterov = false;
  bool has_weight_decay = false;
  Tensor x, y;                      // [n_train + n_val, in] float32, [..] int64
  StateDict initial, final_params;  // "0.weight", ...
  std::vector<double> step_losses, val_losses;
};

/// Path of a file in tests/data (LOCKSTEP_TEST_DATA_DIR is set by CMake).
std::string test_data_path(const std::string& file);

/// Parses tests/data/<name>.json. Throws lockstep::Error on a malformed file.
Golden load_golden(const std::string& name);

/// All golden trajectory names shipped in tests/data.
std::vector<std::string> golden_names();

/// nn::Sequential of Linear layers with `activation` between them, initial parameters loaded.
std::shared_ptr<nn::Sequential> build_mlp(const Golden& g);

/// The optimizer the golden file describes, over `params`.
std::unique_ptr<optim::Optimizer> build_optimizer(const Golden& g, std::vector<Tensor> params);

/// What a golden run produced: per-step training losses, per-epoch validation losses and the
/// final parameters (copied to the host).
struct GoldenRun {
  std::vector<double> step_losses, val_losses;
  StateDict final_params;
};

/// Replays the golden file's training on `device`: the model built and loaded on the host, then
/// moved there (Module::to), batches in order (DataLoader over the training rows) copied there,
/// cross_entropy, backward, optimizer step; validation after every epoch in eval mode.
/// With `autocast`, each step's forward and loss run under an AutocastGuard (bf16 linear;
/// backward outside, as PyTorch recommends; validation in fp32). `max_steps` >= 0 stops after
/// that many training steps (no validation after a partial epoch).
GoldenRun run_golden(const Golden& g, Device device = cpu(), bool autocast = false,
                     std::int64_t max_steps = -1);

/// How run_golden_data_parallel trains: the gather path (forward on the wrapper, the loss on the
/// gathered output, backward) or the reducer path (forward_backward).
enum class DataParallelPath { Gather, Reducer };

/// Replays the golden file's training through nn::DataParallel over `devices` with `options`
/// (the model built on the host, the optimizer over the wrapper's parameters; zero_grad, forward
/// and backward or forward_backward, optimizer->step() on the calling thread). Losses are read on
/// the wrapper's output device; final parameters are copied to the host. `autocast` and `max_steps`
/// as in run_golden (the forward, or forward_backward, under the guard on the calling thread;
/// DataParallel carries it to its workers).
GoldenRun run_golden_data_parallel(const Golden& g, const std::vector<Device>& devices,
                                   DataParallelPath path,
                                   parallel::DataParallelOptions options = {},
                                   bool autocast = false, std::int64_t max_steps = -1);

/// EXPECTs that `run` reproduces golden file `g`: the same number of final parameters, and the
/// step losses, validation losses and every final parameter within tolerance.h's rule
/// |a − b| ≤ atol + rtol·|b| (b: PyTorch's value). `what` prefixes each failure message.
void expect_golden(const GoldenRun& run, const Golden& g, const std::string& what = "",
                   double rtol = kRtol, double atol = kAtol);

/// EXPECTs that two runs are bit-identical: every step loss (compared as bits), the validation
/// losses and every final parameter (BitEqual). `what` prefixes each failure message.
void expect_bit_identical(const GoldenRun& a, const GoldenRun& b, const std::string& what = "");

}  // namespace lockstep::testing
