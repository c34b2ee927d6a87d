// DataParallel on CUDA devices (replicas on GPUs, gradients reduced over an NCCL group): the
// golden trajectories through both training paths on one GPU (a group of size 1, which still
// runs every NCCL call) and, where the machine has two or more, on all of its GPUs; the
// refusals; deterministic mode (shards summed by the tree kernel on
// cuda:0): the golden files, bit-identical twice and across GPU counts. Needs a GPU (each test
// skips with the reason otherwise; tests/cuda/device_test.cpp has the refusals that need none).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"
#include "support/golden.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using Path = DataParallelPath;

std::vector<Device> gpus(int n) {
  std::vector<Device> d;
  for (int k = 0; k < n; ++k) d.push_back(Device(DeviceType::CUDA, k));
  return d;
}

GoldenRun train(const Golden& g, const std::vector<Device>& devices, Path path) {
  return run_golden_data_parallel(g, devices, path);
}

// The golden files within the GPU tolerance |a − b| ≤ 1e-4 + 1e-4·|b|.
void expect_matches(const GoldenRun& run, const Golden& g, const std::string& what) {
  expect_golden(run, g, what, 1e-4, 1e-4);
}

// Every golden file on one GPU (NCCL group of size 1) through both paths.
TEST(DataParallelCuda, GoldenTrajectoriesOnOneGpu) {
  LOCKSTEP_REQUIRE_CUDA();
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    expect_matches(train(g, gpus(1), Path::Gather), g, name + " gather");
    expect_matches(train(g, gpus(1), Path::Reducer), g, name + " reducer");
  }
}

// Every golden file on all the machine's GPUs (replicas on each, reduced to cuda:0 over NCCL).
TEST(DataParallelCuda, GoldenTrajectoriesOnEveryGpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const int n = cuda::device_count();
  if (n < 2) GTEST_SKIP() << "needs two or more GPUs, this machine has " << n;
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    const std::string what = name + " on " + std::to_string(n) + " GPUs";
    expect_matches(train(g, gpus(n), Path::Gather), g, what + " gather");
    expect_matches(train(g, gpus(n), Path::Reducer), g, what + " reducer");
  }
}

// Two steps on one GPU give the same bits twice (one stream, fixed-order kernels, one rank).
TEST(DataParallelCuda, RunsTwiceBitIdenticalOnOneGpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const Golden g = load_golden(golden_names().front());
  expect_bit_identical(train(g, gpus(1), Path::Reducer), train(g, gpus(1), Path::Reducer));
}

TEST(DataParallelCuda, WhatIsNotBuiltOnGpusIsRefused) {
  LOCKSTEP_REQUIRE_CUDA();
  auto model = std::make_shared<nn::Linear>(3, 2);
  parallel::DataParallelOptions ddp;
  ddp.process_group = dist::new_thread_group(1)[0];
  expect_error<DeviceError>([&] { parallel::DataParallel dp(model, gpus(1), std::nullopt, ddp); },
                            {"DistributedDataParallel", "CUDA"});
}

// ---- deterministic mode on GPUs ----------------------------------------------------------------

GoldenRun train_deterministic(const Golden& g, const std::vector<Device>& devices, Path path) {
  parallel::DataParallelOptions o;
  o.deterministic = true;
  return run_golden_data_parallel(g, devices, path, o);
}

// Every golden file on cuda:0 in deterministic mode (shards of 8, the tree kernel on cuda:0)
// through both paths: within the GPU tolerance of the golden files and the same bits twice.
TEST(DataParallelCuda, DeterministicOnCuda0MatchesGoldenAndRepeatsBitForBit) {
  LOCKSTEP_REQUIRE_CUDA();
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    for (Path path : {Path::Reducer, Path::Gather}) {
      const std::string what =
          name + " deterministic" + (path == Path::Reducer ? " reducer" : " gather");
      const GoldenRun a = train_deterministic(g, gpus(1), path);
      expect_matches(a, g, what);
      expect_bit_identical(a, train_deterministic(g, gpus(1), path), what + ", two runs");
    }
  }
}

// 1 GPU and 2, …, every GPU (where there are 2 or more): the same bits through each path (the
// same shards, per-shard GEMM shapes and tree on every device count; GPUs of one model with the
// same SM count, see docs/cuda.md).
TEST(DataParallelCuda, DeterministicBitIdenticalAcrossGpuCounts) {
  LOCKSTEP_REQUIRE_CUDA();
  const int n = cuda::device_count();
  if (n < 2) GTEST_SKIP() << "needs two or more GPUs, this machine has " << n;
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    for (Path path : {Path::Reducer, Path::Gather}) {
      const GoldenRun one = train_deterministic(g, gpus(1), path);
      for (int k = 2; k <= n; ++k)
        expect_bit_identical(one, train_deterministic(g, gpus(k), path),
                             name + (path == Path::Reducer ? " reducer" : " gather") + " on " +
                                 std::to_string(k) + " GPUs vs 1");
    }
  }
}

// Under bf16 autocast (cublasGemmEx per shard, fp32 accumulation): twice the same bits on cuda:0,
// and, where there are two or more GPUs, the same bits on all of them (20 steps of each file).
TEST(DataParallelCuda, DeterministicUnderBf16AutocastIsBitIdentical) {
  LOCKSTEP_REQUIRE_CUDA();
  parallel::DataParallelOptions o;
  o.deterministic = true;
  const int n = cuda::device_count();
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    auto run = [&](int k) {
      return run_golden_data_parallel(g, gpus(k), Path::Reducer, o, /*autocast=*/true,
                                      /*max_steps=*/20);
    };
    const GoldenRun one = run(1);
    expect_bit_identical(one, run(1), name + " bf16 deterministic, two runs");
    if (n >= 2) expect_bit_identical(one, run(n), name + " bf16 deterministic, 1 vs all GPUs");
  }
}

// The GPU and the CPU run the same plan and tree; their GEMMs differ (cuBLAS vs OpenBLAS), so the
// results agree within the GPU tolerance, not bit for bit.
TEST(DataParallelCuda, DeterministicOnGpuAgreesWithDeterministicOnCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const Golden g = load_golden(golden_names().front());
  const GoldenRun gpu = train_deterministic(g, gpus(1), Path::Reducer);
  const GoldenRun host = train_deterministic(g, {cpu(0), cpu(1)}, Path::Reducer);
  for (const auto& [key, t] : host.final_params)
    EXPECT_TRUE(close(gpu.final_params.at(key).to_vector<double>(), t.to_vector<double>())) << key;
}

// The replicas' parameters are refreshed from the master before each step: after a step every
// replica holds the master's values (bit for bit), and the master's .grad is on cuda:0.
TEST(DataParallelCuda, ReplicasFollowTheMaster) {
  LOCKSTEP_REQUIRE_CUDA();
  const int n = cuda::device_count();
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, 4), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4, 3)});
  nn::DataParallel dp(model, gpus(n));
  optim::SGD opt(dp.parameters(), {.lr = 0.1});
  Tensor x = randn({9, 5}), y = randint(0, 3, {9});
  nn::CrossEntropyLoss criterion;
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    (void)dp.forward_backward(x, y, criterion);
    for (const Tensor& p : dp.parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().device(), Device(DeviceType::CUDA, 0));
    }
    opt.step();
  }
  (void)dp.forward_backward(x, y, criterion);  // refreshes every replica from the master
  const auto master = dp.module()->state_dict();
  for (int k = 0; k < n; ++k) {
    const auto replica = dp.replica(static_cast<std::size_t>(k))->state_dict();
    for (const auto& [key, t] : master)
      EXPECT_EQ(replica.at(key).to_vector<double>(), t.to_vector<double>())
          << key << " on replica " << k;
  }
}

}  // namespace
}  // namespace lockstep::testing
