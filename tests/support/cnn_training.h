// Training the CNN golden files' model (support/cnn_golden.h) the ways the tests compare with
// PyTorch: as a plain module, or through DataParallel (forward_backward or the gather path), with
// plain or synchronized BatchNorm; and the comparison with a file's expected trajectory.
#pragma once

#include <string>
#include <vector>

#include "lockstep/parallel/distributed.h"
#include "support/cnn_golden.h"

namespace lockstep::testing {

// Conv and BatchNorm sum in other orders than PyTorch's kernels; four steps of training on
// top of that stay within these (float32).
constexpr double kCnnRtol = 1e-4, kCnnAtol = 1e-5;

enum class CnnHow { Module, Reducer, Gather };

struct CnnTrained {
  std::vector<double> losses;
  std::vector<std::vector<double>> running_mean_1;  // layer 1's, after each step
  StateDict state;                                  // the model's, after the last step
  std::vector<double> eval_output;                  // eval-mode logits of rows 0-7
};

struct CnnRun {
  int devices = 1;
  CnnHow how = CnnHow::Reducer;
  bool sync_bn = false;  // convert_sync_batchnorm before wrapping
  parallel::DataParallelOptions options{};
  // With a group: DistributedDataParallel over it (devices per rank, options' deterministic and
  // shard_size), each rank training on its split_batch part of every batch (how == Reducer).
  std::shared_ptr<dist::ProcessGroup> group = nullptr;
};

/// g.steps steps of g's optimizer on batches 0, 1, 0, 1, ... from g.initial.
CnnTrained train_cnn(const CnnGolden& g, const CnnRun& run);

/// gtest expectations: t against e within kCnnRtol / kCnnAtol (num_batches_tracked exactly).
void expect_cnn_matches(const CnnTrained& t, const CnnGolden::Expected& e, const std::string& what);

/// gtest expectations: b's losses and final state have a's bits exactly (deterministic mode).
void expect_cnn_bits_equal(const CnnTrained& a, const CnnTrained& b, const std::string& what);

}  // namespace lockstep::testing
