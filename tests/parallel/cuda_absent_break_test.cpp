// Adversarial probes (breaker) of every entry point that takes a cuda:k device, on a machine or
// build without a GPU: each must fail with a typed error naming the device, before anything is
// half done, and leave what it was given usable on the CPU. They skip where a GPU is present.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/cuda/runtime.h"
#include "lockstep/dist/nccl.h"
#include "lockstep/parallel/distributed.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);
const Device kCuda1(DeviceType::CUDA, 1);

#define SKIP_WITH_GPU()                                \
  if (cuda::device_count() > 0)                        \
  GTEST_SKIP() << "a GPU is present; these probe the " \
                  "no-GPU paths"

TEST(CudaAbsentBreak, TensorFactoriesAndToNameTheDevice) {
  SKIP_WITH_GPU();
  expect_error<DeviceError>([] { (void)ones({2}).to(kCuda0); }, {"cuda:0"});
  expect_error<DeviceError>([] { (void)zeros({2, 3}, kCuda1); }, {"cuda:1"});
  expect_error<DeviceError>([] { (void)randn({4}, TensorOptions(kFloat64).device(kCuda0)); },
                            {"cuda:0"});
  expect_error<DeviceError>([] { (void)full({3}, 1.5, kCuda0); }, {"cuda:0"});
  expect_error<DeviceError>([] { (void)ones({2}).requires_grad_(true).to(kCuda0); }, {"cuda:0"});
}

TEST(CudaAbsentBreak, EmptyTensorsCannotLandOnAMissingGpuEither) {
  // No bytes to allocate must not mean no check: a "cuda:0" tensor in a process without one.
  SKIP_WITH_GPU();
  expect_error<DeviceError>([] { (void)zeros({0}, kCuda0); }, {"cuda:0"});
  expect_error<DeviceError>([] { (void)empty({0, 3}, kCuda0); }, {"cuda:0"});
  expect_error<DeviceError>([] { (void)zeros({0, 3}).to(kCuda0); }, {"cuda:0"});
}

TEST(CudaAbsentBreak, ModuleToFailsCleanlyAndTheModuleStillTrainsOnTheCpu) {
  SKIP_WITH_GPU();
  manual_seed(1);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(3, 4));
  net->push_back(std::make_shared<nn::Linear>(4, 2));
  std::vector<Tensor> before;
  for (auto& p : net->parameters()) before.push_back(p.detach().clone());
  expect_error<DeviceError>([&] { net->to(kCuda0); }, {"cuda:0"});
  auto params = net->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].device().is_cpu()) << i;
    EXPECT_TRUE(BitEqual(params[i], before[i])) << i;
  }
  Tensor loss = sum(net->forward(ones({5, 3})));
  loss.backward();
  for (auto& p : params) EXPECT_TRUE(p.grad().defined());
}

TEST(CudaAbsentBreak, DataParallelWithGpuDevicesNamesTheDevice) {
  SKIP_WITH_GPU();
  auto make = [] { return std::make_shared<nn::Linear>(3, 2); };
  expect_error<DeviceError>([&] { parallel::DataParallel dp(make(), {kCuda0}); }, {"cuda:0"});
  expect_error<DeviceError>(
      [&] {
        parallel::DataParallel dp(make(), {cpu(0), kCuda1});
      },
      {"cuda:1"});
  expect_error<DeviceError>(
      [&] {
        parallel::DataParallel dp(make(), {kCuda0, kCuda0});
      },
      {"cuda:0"});
  // CPU replicas gathering on a GPU that is not there.
  expect_error<DeviceError>([&] { parallel::DataParallel dp(make(), cpus(2), kCuda0); },
                            {"cuda:0"});
  // The module is untouched and can still be wrapped on CPUs.
  auto m = make();
  Tensor w = m->weight.detach().clone();
  expect_error<DeviceError>([&] { parallel::DataParallel dp(m, {cpu(0), kCuda0}); }, {"cuda:0"});
  EXPECT_TRUE(BitEqual(m->weight, w));
  parallel::DataParallel dp(m, cpus(2));
  EXPECT_EQ(dp.forward(ones({4, 3})).shape(), Shape({4, 2}));
  // Moving a CPU DataParallel to a GPU is refused naming it.
  expect_error<DeviceError>([&] { dp.to(kCuda0); }, {"cuda:0"});
}

TEST(CudaAbsentBreak, DistributedDataParallelWithGpuDevicesNamesTheDevice) {
  SKIP_WITH_GPU();
  auto groups = dist::new_thread_group(1);
  parallel::DistributedDataParallelOptions o;
  o.device_ids = {kCuda0};
  expect_error<DeviceError>(
      [&] {
        parallel::DistributedDataParallel ddp(std::make_shared<nn::Linear>(3, 2), groups[0], o);
      },
      {"cuda:0"});
}

TEST(CudaAbsentBreak, NcclGroupRefusedWithATypedError) {
  SKIP_WITH_GPU();
  if (!dist::nccl_available()) {
    // Builds without the backend: DistError for every call, saying why.
    for (const auto& list : std::vector<std::vector<Device>>{
             {}, {kCuda0}, {kCuda0, kCuda0}, {cpu(0)}, {kCuda0, kCuda1}})
      expect_error<DistError>([&] { (void)dist::new_nccl_group(list); }, {"NCCL"});
    auto boot = dist::new_thread_group(1);
    expect_error<DistError>([&] { (void)dist::new_nccl_group(boot[0], kCuda0); }, {"NCCL"});
    EXPECT_TRUE(dist::nccl_version().empty());
    return;
  }
  // CUDA builds on a machine without a GPU: the documented errors.
  expect_error<ValueError>([] { (void)dist::new_nccl_group(std::vector<Device>{}); }, {});
  expect_error<ValueError>([] { (void)dist::new_nccl_group({kCuda0, kCuda0}); }, {"cuda:0"});
  expect_error<DeviceError>([] { (void)dist::new_nccl_group({cpu(0)}); }, {"cpu:0"});
  expect_error<CudaError>([] { (void)dist::new_nccl_group({kCuda0}); }, {"cuda:0"});
}

TEST(CudaAbsentBreak, CatAlongDimZeroOnTheCpuStillBehaves) {
  // cat's dim-0 fast path (and its new CUDA branch) must not change CPU results.
  Tensor a = arange(0, 6, 1, kFloat32).reshape({2, 3});
  Tensor b = arange(6, 9, 1, kFloat32).reshape({1, 3});
  Tensor e = zeros({0, 3});
  Tensor c = cat({a, e, b, e}, 0);
  EXPECT_EQ(c.shape(), Shape({3, 3}));
  auto v = c.to_vector<float>();
  for (int i = 0; i < 9; ++i) EXPECT_EQ(v[static_cast<std::size_t>(i)], static_cast<float>(i));
  // A non-contiguous input (a transpose) along dim 0.
  Tensor tr = t(arange(0, 6, 1, kFloat32).reshape({3, 2}));  // [[0,2,4],[1,3,5]]
  auto w = cat({tr, b}, 0).to_vector<float>();
  const float want[] = {0, 2, 4, 1, 3, 5, 6, 7, 8};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(w[static_cast<std::size_t>(i)], want[i]) << i;
  // Only empty pieces.
  EXPECT_EQ(cat({e, e}, 0).shape(), Shape({0, 3}));
  // Bad inputs keep their typed errors.
  expect_error<DTypeError>([&] { (void)cat({a, a.to(kFloat64)}, 0); }, {"cat"});
  expect_error<ShapeError>([&] { (void)cat({a, zeros({2, 4})}, 0); }, {"cat"});
  expect_error<ValueError>([] { (void)cat({}, 0); }, {"cat"});
  // Gradient flows back to each piece.
  Tensor x = ones({2, 3}).requires_grad_(true), y = ones({1, 3}).requires_grad_(true);
  sum(mul(cat({x, y}, 0), 2.0)).backward();
  EXPECT_TRUE(BitEqual(x.grad(), full({2, 3}, 2.0)));
  EXPECT_TRUE(BitEqual(y.grad(), full({1, 3}, 2.0)));
}

}  // namespace
}  // namespace lockstep::testing
