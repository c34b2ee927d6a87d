// A whole training step captured into a CUDA graph and replayed (`lockstep train --cuda-graphs`):
// zero_grad, forward, loss, backward, gradient reduction and the optimizer's step of a
// DataParallel on ONE GPU, PyTorch's "whole network capture" recipe (torch.cuda.graphs docs,
// "Whole-network capture": warm up eagerly, capture one step on static input tensors, then per
// step copy the batch into the static inputs and replay).
//
//   parallel::CUDAGraphStep step(dp, optimizer);  // dp on cuda:0, optimizer over dp.parameters()
//   for (auto& [x, y] : loader) loss = step.step(x, y);
//
// Which way a step runs (GraphStepPlanner, host policy): the first batch's shapes (input and
// target) are the static shapes (until the capture, a batch with more rows replaces them). Batches
// of the static shapes run `warmup_steps` eager steps (they also create the optimizer's state and
// cuBLAS's handles), then one is captured and replayed, and every later one replays the graph. A
// batch of other shapes (the last partial batch of an epoch) runs eagerly; it does not disturb the
// graph: parameters, optimizer state and gradient buffers are the same tensors in both ways, and
// the optimizer's step counts and lr are host values the replays read
// (optim::Optimizer::prepare_graph_replay).
//
// Same results: a replay runs the same kernels as an eager step with the same operands, so a run
// with graphs is bit-identical to the same run without (tested on a GPU:
// tests/cuda/cuda_graph_test.cpp). Differences, all documented here:
//   - the chunk's loss weight under capture is 1 (one GPU), not count/count: identical unless
//     every target of a batch equals ignore_index, where the eager step skips the update and a
//     replay makes one with zero gradients (weight decay and momentum still act);
//   - an out-of-range target is found after the replay (CUDAGraph::check_replay): the same
//     IndexError as eager, but that step's update (with NaN gradients) has been made; training
//     must stop there (the CLI does);
//   - the loss of a replayed step is read after the step's optimizer update (eagerly: before).
//
// Refused (ValueError naming the reason): a DataParallel on several devices, on CPU devices, a
// DistributedDataParallel, deterministic mode, a step under an autocast region (bf16), and (from
// DataParallel) no_sync(). Dropout in training mode is refused during the capture (its mask would
// be recorded once and repeated by every replay).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/nn/loss.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/data_parallel.h"

namespace lockstep::parallel {

/// How one step runs under CUDAGraphStep.
enum class GraphStepAction {
  Eager,    ///< a batch of other shapes than the static ones: an eager step
  Warmup,   ///< a batch of the static shapes before the capture: an eager step
  Capture,  ///< capture the step on the static inputs, then replay it once
  Replay,   ///< copy the batch into the static inputs and replay the graph
};

/// The host policy of CUDAGraphStep (no device needed): which action each batch gets.
class GraphStepPlanner {
 public:
  /// warmup_steps >= 1 (the optimizer's state must exist before the capture); ValueError
  /// otherwise.
  explicit GraphStepPlanner(int warmup_steps = 2);
  /// The action for the next batch with these input and target shapes; records it. The first
  /// batch's shapes are the static shapes; until the capture, a batch with more rows (dim 0)
  /// replaces them and the warm-up starts again (a run starting at a partial batch captures the
  /// full ones). Warmup and Capture count towards the capture.
  GraphStepAction next(const Shape& input, const Shape& target);
  /// Forgets the capture (a reset graph): the next batches of the static shapes warm up again.
  void reset();
  bool captured() const { return captured_; }
  int warmup_steps() const { return warmup_; }
  /// The static shapes (nullopt before the first batch).
  const std::optional<std::pair<Shape, Shape>>& static_shapes() const { return shapes_; }

 private:
  int warmup_;
  int warmed_ = 0;
  bool captured_ = false;
  std::optional<std::pair<Shape, Shape>> shapes_;
};

struct CUDAGraphStepOptions {
  /// Eager steps of the static shapes before the capture (>= 1).
  int warmup_steps = 2;
  /// Cross-entropy's ignore_index.
  std::int64_t ignore_index = -100;
};

/// One DataParallel training step on one GPU, captured once and replayed (see above).
class CUDAGraphStep {
 public:
  /// `dp` on exactly one CUDA device (device_ids() == {cuda:k}), without a process group or
  /// deterministic mode; `optimizer` over dp's parameters, stepped right after forward_backward
  /// (eagerly, and inside the captured graph: its flat step, Optimizer::prepare_graph_replay).
  /// Both must outlive this object. ValueError naming the reason otherwise.
  CUDAGraphStep(DataParallel& dp, std::shared_ptr<optim::Optimizer> optimizer,
                CUDAGraphStepOptions options = {});
  ~CUDAGraphStep();
  CUDAGraphStep(const CUDAGraphStep&) = delete;
  CUDAGraphStep& operator=(const CUDAGraphStep&) = delete;

  /// One training step on input [B, ...] and int64 targets [B] (any device; copied to the GPU):
  /// optimizer->zero_grad(), forward_backward with cross-entropy, optimizer->step(). Returns
  /// the step's mean loss (as dp.forward_backward(...).item()). Errors: those of an eager step
  /// (ShapeError, IndexError for a target out of range — after a replay, see above, ...);
  /// ValueError under an enabled autocast region; CudaError when the capture fails (the graph is
  /// then reset and the step is not made).
  double step(const Tensor& input, const Tensor& target);
  /// step() without waiting for the GPU: returns the step's loss as a 0-d tensor on the device
  /// (after a replay: the graph's static loss tensor, overwritten by the next replay) and leaves
  /// the replay's target check to check() or the next step(). Only the last replay is checked
  /// then: call check() after each step_async() whose targets may be out of range. For
  /// benchmarks and pipelines that read the loss later; the same errors otherwise.
  Tensor step_async(const Tensor& input, const Tensor& target);
  /// Waits for the last replay and runs its checks (CUDAGraph::check_replay): IndexError for a
  /// target out of range. Nothing to do when the last step was eager.
  void check();

  /// How the last step() ran.
  GraphStepAction last_action() const { return last_; }
  /// Replays so far (the capture's own first replay included).
  std::int64_t replays() const { return replays_; }
  const cuda::CUDAGraph& graph() const { return graph_; }
  /// Drops the graph, the static tensors and the optimizer's captured step; the next batches of
  /// the static shapes warm up and capture again.
  void reset();

 private:
  Tensor eager(const Tensor& input, const Tensor& target);
  void capture(const Tensor& input, const Tensor& target);
  Tensor replay(const Tensor& input, const Tensor& target);

  DataParallel& dp_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  CUDAGraphStepOptions options_;
  nn::CrossEntropyLoss loss_;
  GraphStepPlanner planner_;
  Device device_;
  cuda::CUDAGraph graph_;
  Tensor static_input_, static_target_, static_loss_;
  std::vector<Tensor> captured_grads_;  // the master parameters' .grad after the capture
  GraphStepAction last_ = GraphStepAction::Eager;
  std::int64_t replays_ = 0;
  bool unchecked_ = false;  // a replay whose checks have not run yet
};

}  // namespace lockstep::parallel
