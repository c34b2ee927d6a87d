// CUDA graphs on a GPU (skipped with the reason elsewhere; the host policy and the refusals that
// need no GPU are in tests/parallel/cuda_graph_step_test.cpp and tests/e2e/cli_cuda_graphs_test):
// CUDAGraph capture and replay of an op sequence equal to eager; the allocator's private pool;
// host reads refused during a capture; the whole training step graphed (parallel::CUDAGraphStep)
// reproducing the golden trajectories, bit-identical to the eager DataParallel run (a partial
// last batch and Adam included), an LR change between replays, and a bad label under a replay.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "e2e/cli_support.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/lockstep.h"
#include "support/golden.h"

namespace lockstep::testing {
namespace {

const Device kGpu(DeviceType::CUDA, 0);

Tensor on_gpu(const std::vector<float>& v) {
  return tensor(std::span<const float>(v), {static_cast<std::int64_t>(v.size())}).to(kGpu);
}

// out = relu(a·b + a) − b, the ops the reference workload uses.
Tensor ops(const Tensor& a, const Tensor& b) { return sub(relu(add(mul(a, b), a)), b); }

TEST(CudaGraph, ReplayEqualsEagerAndReadsTheStaticInputsAgain) {
  LOCKSTEP_REQUIRE_CUDA();
  NoGradGuard no_grad;
  Tensor a = on_gpu(random_floats(1000, 1)), b = on_gpu(random_floats(1000, 2));
  Tensor out = zeros({1000}, TensorOptions().device(kGpu));
  cuda::CUDAGraph g;
  g.capture_begin(0);
  EXPECT_TRUE(cuda::is_current_stream_capturing(0));
  EXPECT_EQ(cuda::CUDAGraph::capturing_on(0), &g);
  out.copy_(ops(a, b));
  g.capture_end();
  EXPECT_FALSE(cuda::is_current_stream_capturing(0));
  EXPECT_TRUE(g.captured());
  // Nothing ran during the capture.
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(1000, 0.f));
  g.replay();
  EXPECT_EQ(out.to_vector<float>(), ops(a, b).to_vector<float>());
  // New values in the static inputs, same graph.
  a.copy_(on_gpu(random_floats(1000, 3)));
  b.copy_(on_gpu(random_floats(1000, 4)));
  g.replay();
  g.check_replay();
  EXPECT_EQ(out.to_vector<float>(), ops(a, b).to_vector<float>());
  g.reset();
  EXPECT_FALSE(g.captured());
  EXPECT_THROW(g.replay(), CudaError);
}

TEST(CudaGraph, PrivatePoolIsNotReusedByEagerCodeUntilReset) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::size_t bytes = std::size_t{26} << 20;  // a size class no other test uses (26 MiB)
  const cuda::MemoryStats before = cuda::memory_stats(0);
  cuda::CUDAGraph g;
  g.capture_begin(0);
  void* p = cuda::caching_allocator_alloc(bytes, 0);   // a temporary of the capture
  cuda::caching_allocator_delete(p);                   // back to the graph's pool
  void* p2 = cuda::caching_allocator_alloc(bytes, 0);  // the same capture reuses it
  EXPECT_EQ(p2, p);
  cuda::caching_allocator_delete(p2);
  g.capture_end();
  EXPECT_EQ(cuda::memory_stats(0).graph_pool_bytes - before.graph_pool_bytes,
            static_cast<std::int64_t>(cuda::round_size(bytes)));
  // Eager code gets another block while the graph lives.
  void* q = cuda::caching_allocator_alloc(bytes, 0);
  EXPECT_NE(q, p);
  g.reset();
  EXPECT_EQ(cuda::memory_stats(0).graph_pool_bytes, before.graph_pool_bytes);
  // Released to the general cache: the next request takes it without cudaMalloc.
  const std::int64_t mallocs = cuda::memory_stats(0).num_cuda_mallocs;
  void* r = cuda::caching_allocator_alloc(bytes, 0);
  EXPECT_EQ(r, p);
  EXPECT_EQ(cuda::memory_stats(0).num_cuda_mallocs, mallocs);
  cuda::caching_allocator_delete(q);
  cuda::caching_allocator_delete(r);
}

// cudaFree synchronizes the device, which would invalidate a running capture: empty_cache()
// keeps the cached blocks of a capturing device (and frees them once the capture is over).
TEST(CudaGraph, EmptyCacheDuringACaptureFreesNothingThere) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::size_t bytes = std::size_t{27} << 20;  // a size class no other test uses (27 MiB)
  cuda::caching_allocator_delete(cuda::caching_allocator_alloc(bytes, 0));  // one cached block
  const std::int64_t frees = cuda::memory_stats(0).num_cuda_frees;
  Tensor a = on_gpu({1.f, 2.f, 3.f});
  Tensor out = zeros({3}, TensorOptions().device(kGpu));
  cuda::CUDAGraph g;
  g.capture_begin(0);
  out.copy_(add(a, a));
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_stats(0).num_cuda_frees, frees);
  g.capture_end();  // not invalidated
  g.replay();
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2.f, 4.f, 6.f}));
  cuda::empty_cache();
  EXPECT_GT(cuda::memory_stats(0).num_cuda_frees, frees);
}

TEST(CudaGraph, HostReadsDuringACaptureAreRefusedAndTheStreamStaysUsable) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor a = on_gpu({1.f, 2.f, 3.f});
  cuda::CUDAGraph g;
  g.capture_begin(0);
  try {
    (void)sum(a).item();
    FAIL() << "item() during a capture";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA graph capture does not allow"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(a.copy_(tensor(std::vector<float>{4.f, 5.f, 6.f})), CudaError);  // an upload
  EXPECT_THROW(cuda::synchronize(0), CudaError);
  g.abort_capture();
  EXPECT_FALSE(g.capturing());
  EXPECT_FALSE(cuda::is_current_stream_capturing(0));
  EXPECT_EQ(sum(a).item(), 6.0);  // eager work runs again
  cuda::CUDAGraph twice;
  twice.capture_begin(0);
  cuda::CUDAGraph other;
  EXPECT_THROW(other.capture_begin(0), CudaError);  // one capture per device at a time
  twice.capture_end();
}

// ---- the whole training step
// ---------------------------------------------------------------------

// A golden file's training through DataParallel on cuda:0, each step through CUDAGraphStep
// (graphs) or zero_grad, forward_backward and step (eager); `lr_at(step)` (when set) changes the
// learning rate before a step, as an LR scheduler would.
GoldenRun run_graphed(const Golden& g, bool graphs, std::vector<parallel::GraphStepAction>* actions,
                      const std::function<double(std::int64_t)>& lr_at = {}) {
  auto dp = std::make_shared<nn::DataParallel>(build_mlp(g), std::vector<Device>{kGpu});
  std::shared_ptr<optim::Optimizer> optimizer = build_optimizer(g, dp->parameters());
  std::unique_ptr<parallel::CUDAGraphStep> step;
  if (graphs) step = std::make_unique<parallel::CUDAGraphStep>(*dp, optimizer);
  Tensor x_train = g.x.narrow(0, 0, g.n_train), y_train = g.y.narrow(0, 0, g.n_train);
  Tensor x_val = g.x.narrow(0, g.n_train, g.n_val), y_val = g.y.narrow(0, g.n_train, g.n_val);
  data::DataLoader loader(std::make_shared<data::TensorDataset>(x_train, y_train),
                          {.batch_size = g.batch_size});
  nn::CrossEntropyLoss criterion;
  GoldenRun run;
  std::int64_t n = 0;
  for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch) {
    dp->train();
    for (const auto& [bx, by] : loader) {
      if (lr_at) optimizer->set_lr(lr_at(n));
      ++n;
      if (step) {
        run.step_losses.push_back(step->step(bx, by));
        if (actions) actions->push_back(step->last_action());
      } else {
        optimizer->zero_grad();
        run.step_losses.push_back(dp->forward_backward(bx, by, criterion).item());
        optimizer->step();
      }
    }
    dp->eval();
    no_grad guard;
    Tensor out = dp->forward(x_val);
    run.val_losses.push_back(criterion(out, y_val.to(out.device())).item());
  }
  for (const auto& [name, value] : dp->state_dict())
    run.final_params.insert(name, value.detach().to(cpu()).clone());
  return run;
}

TEST(CudaGraphStep, GoldenTrajectoriesWithGraphsBitIdenticalToEager) {
  LOCKSTEP_REQUIRE_CUDA();
  // Every golden file: SGD variants, Adam (mlp_adam_tanh), a last partial batch
  // (sgd_dampening_batch23: 23 rows per batch, the epoch's last batch smaller).
  for (const std::string& name : golden_names()) {
    SCOPED_TRACE(name);
    const Golden g = load_golden(name);
    std::vector<parallel::GraphStepAction> actions;
    const GoldenRun graphed = run_graphed(g, true, &actions);
    expect_golden(graphed, g, name + " with CUDA graphs", 1e-4, 1e-4);
    expect_bit_identical(graphed, run_graphed(g, false, nullptr), name + " graphs vs eager");
    // The graph was captured and replayed (the files have more steps than the warm-up).
    std::int64_t replays = 0;
    for (auto a : actions) replays += a == parallel::GraphStepAction::Replay;
    EXPECT_GT(replays, 0) << name;
  }
}

TEST(CudaGraphStep, PartialLastBatchRunsEagerlyBetweenReplays) {
  LOCKSTEP_REQUIRE_CUDA();
  const Golden g = load_golden("sgd_dampening_batch23");
  ASSERT_NE(g.n_train % g.batch_size, 0) << "the file should have a partial last batch";
  std::vector<parallel::GraphStepAction> actions;
  (void)run_graphed(g, true, &actions);
  const std::int64_t per_epoch = (g.n_train + g.batch_size - 1) / g.batch_size;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if ((static_cast<std::int64_t>(i) + 1) % per_epoch == 0) {
      EXPECT_EQ(actions[i], parallel::GraphStepAction::Eager) << "step " << i + 1;
    } else if (i >= 3) {
      EXPECT_EQ(actions[i], parallel::GraphStepAction::Replay) << "step " << i + 1;
    }
  }
}

TEST(CudaGraphStep, LearningRateChangesBetweenReplaysTakeEffect) {
  LOCKSTEP_REQUIRE_CUDA();
  for (const std::string name : {"seed_mlp_sgd", "mlp_adam_tanh"}) {
    SCOPED_TRACE(name);
    const Golden g = load_golden(name);
    auto lr_at = [&g](std::int64_t step) { return g.lr / static_cast<double>(1 + step); };
    const GoldenRun graphed = run_graphed(g, true, nullptr, lr_at);
    expect_bit_identical(graphed, run_graphed(g, false, nullptr, lr_at), name);
    // And the schedule changed the trajectory (a replay that kept the captured lr would not).
    const GoldenRun constant = run_graphed(g, true, nullptr);
    EXPECT_NE(graphed.step_losses.back(), constant.step_losses.back());
  }
}

TEST(CudaGraphStep, BadLabelUnderAReplayIsTheCpuIndexError) {
  LOCKSTEP_REQUIRE_CUDA();
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(4, 3));
  nn::DataParallel dp(model, std::vector<Device>{kGpu});
  std::shared_ptr<optim::Optimizer> opt =
      std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  parallel::CUDAGraphStep step(dp, opt, {.warmup_steps = 1});
  const Tensor x = ones({4, 4});
  const Tensor good = tensor(std::vector<std::int64_t>{0, 1, 2, 1});
  const Tensor bad = tensor(std::vector<std::int64_t>{0, 1, 7, 1});
  (void)step.step(x, good);  // warm-up
  (void)step.step(x, good);  // capture + replay
  ASSERT_EQ(step.last_action(), parallel::GraphStepAction::Capture);
  try {
    (void)step.step(x, bad);
    FAIL() << "a target out of range replayed without an error";
  } catch (const IndexError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cross_entropy: target 7 at row 2 is out of range for 3 classes (expected 0 <= "
              "target < 3)");
  }
  EXPECT_EQ(step.last_action(), parallel::GraphStepAction::Replay);
}

// The step steps the optimizer it was given: the parameters move, eagerly and replayed.
TEST(CudaGraphStep, StepsTheGivenOptimizer) {
  LOCKSTEP_REQUIRE_CUDA();
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(4, 3));
  nn::DataParallel dp(model, std::vector<Device>{kGpu});
  std::shared_ptr<optim::Optimizer> opt =
      std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  parallel::CUDAGraphStep step(dp, opt, {.warmup_steps = 1});
  for (auto action : {parallel::GraphStepAction::Warmup, parallel::GraphStepAction::Capture,
                      parallel::GraphStepAction::Replay}) {
    const Tensor before = dp.parameters()[0].to(cpu()).clone();
    (void)step.step(ones({4, 4}), tensor(std::vector<std::int64_t>{0, 1, 2, 1}));
    EXPECT_EQ(step.last_action(), action);
    EXPECT_NE(dp.parameters()[0].to(cpu()).to_vector<float>(), before.to_vector<float>());
  }
}

TEST(CudaGraphStep, RefusesAStepUnderAutocast) {
  LOCKSTEP_REQUIRE_CUDA();
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(4, 3));
  nn::DataParallel dp(model, std::vector<Device>{kGpu});
  std::shared_ptr<optim::Optimizer> opt =
      std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  parallel::CUDAGraphStep step(dp, opt);
  AutocastGuard bf16(true);
  EXPECT_THROW((void)step.step(ones({4, 4}), tensor(std::vector<std::int64_t>{0, 1, 2, 1})),
               ValueError);
}

// `lockstep train --cuda-graphs` on cuda:0 gives the weights of the same run without it, bit for
// bit (SGD with momentum; Adam with a StepLR schedule, so the lr changes between replays), and a
// run resumes across the two (the flag is not part of the checkpoint's fingerprint).
TEST(CudaGraphCli, TrainWithGraphsEqualsEagerAndResumesAcross) {
  LOCKSTEP_REQUIRE_CUDA();
  using e2e::operator+;
  e2e::TempDir dir;
  auto weights = [](const std::string& path) {
    return safetensors::to_state_dict(safetensors::load_file(path));
  };
  auto expect_same = [](const StateDict& a, const StateDict& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (const auto& [key, t] : b)
      EXPECT_EQ(a.at(key).to_vector<float>(), t.to_vector<float>()) << what << ": " << key;
  };
  const std::vector<std::vector<std::string>> configs{
      {"--optimizer", "sgd", "--momentum", "0.9"},
      {"--optimizer", "adam", "--lr-schedule", "step:1:0.5"}};
  for (std::size_t c = 0; c < configs.size(); ++c) {
    const std::string tag = std::to_string(c);
    const std::vector<std::string> common =
        std::vector<std::string>{"train",  "--devices", "cuda:0",       "--quiet",
                                 "--seed", "5",         "--batch-size", "48"} +
        configs[c];
    e2e::RunResult graphs =
        e2e::lockstep(common + std::vector<std::string>{"--epochs", "2", "--cuda-graphs", "--save",
                                                        dir / ("graphs" + tag)});
    ASSERT_EQ(graphs.status, 0) << graphs.err;
    e2e::RunResult eager = e2e::lockstep(
        common + std::vector<std::string>{"--epochs", "2", "--save", dir / ("eager" + tag)});
    ASSERT_EQ(eager.status, 0) << eager.err;
    expect_same(weights(dir / ("graphs" + tag)), weights(dir / ("eager" + tag)), "config " + tag);
    // One epoch with graphs, then resumed to two without.
    const std::string ckpt = dir / ("ckpt" + tag);
    e2e::RunResult first =
        e2e::lockstep(common + std::vector<std::string>{"--epochs", "1", "--cuda-graphs",
                                                        "--checkpoint-dir", ckpt});
    ASSERT_EQ(first.status, 0) << first.err;
    e2e::RunResult resumed = e2e::lockstep(
        common + std::vector<std::string>{"--epochs", "2", "--checkpoint-dir", ckpt, "--resume",
                                          "--save", dir / ("resumed" + tag)});
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    expect_same(weights(dir / ("resumed" + tag)), weights(dir / ("eager" + tag)),
                "config " + tag + " resumed");
  }
}

}  // namespace
}  // namespace lockstep::testing
