// Loader for the CNN golden trajectories (tests/data/cnn/*.json, made by
// tests/data/cnn/make_cnn_golden.py; format in tests/data/cnn/README.md).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {

struct CnnGolden {
  std::string name;
  std::vector<std::string> layers;  // PyTorch's spelling of each layer, for messages
  bool conv_bias = true;            // whether the Conv2d layers have a bias
  Tensor x, y;                      // [16, 1, 12, 12] float32, [16] int64
  StateDict initial;                // parameters and buffers, PyTorch's keys
  std::string optimizer;            // sgd | adam
  double lr = 0, momentum = 0;
  std::int64_t batch_size = 0, steps = 0;
  // What PyTorch produced, by device count (1: the plain model; N: DataParallel's step).
  struct Expected {
    std::vector<double> step_losses;
    std::vector<std::vector<double>> running_mean_1;  // layer 1's running_mean after each step
    StateDict final_state;                            // parameters and buffers
    std::vector<double> eval_output;                  // eval-mode logits of rows 0-7, flat
  };
  std::map<int, Expected> expected;
};

/// Parses tests/data/cnn/<name>.json. Throws lockstep::Error on a missing or malformed file.
CnnGolden load_cnn_golden(const std::string& name);

/// The golden files' CNN with fresh parameters: Conv2d(1,4,3,p=1) BatchNorm2d(4) ReLU
/// MaxPool2d(2) Conv2d(4,8,3,p=1) BatchNorm2d(8) ReLU MaxPool2d(2) Flatten Linear(72,16) ReLU
/// Linear(16,10) (the main job's layer indices), the Conv2d layers with or without a bias.
std::shared_ptr<nn::Sequential> small_cnn(bool conv_bias = true);

}  // namespace lockstep::testing
