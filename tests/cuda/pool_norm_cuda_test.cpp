// max_pool2d, avg_pool2d, adaptive_avg_pool2d and batch_norm on cuda:0 against the same ops on
// the CPU (fast kernels), over the tables of tests/ops/pool_norm_cases.h, float32 and float64:
// the output, every input's gradient and the running statistics after the call. The pools run
// the CPU's shared bodies (src/ops/pool_norm_bodies.h) with round-to-nearest intrinsics, so
// they must agree bit for bit; batch norm's per-channel sums are a block reduction in double
// (another order than the CPU's loop), so it agrees within |cuda − cpu| ≤ tol + tol·|cpu|, tol
// 1e-5 (float32) or 1e-12 (float64). Mixed devices fail with DeviceError. Every test skips,
// printing the reason, where no GPU is present.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "ops/pool_norm_cases.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);

// Output, each input's gradient and the running statistics, all copied to the host; the same
// seeded inputs and output gradient on every device.
std::vector<Tensor> run_on(const PoolNormCase& c, DType dtype, Device device) {
  Generator gen(77);
  std::vector<Tensor> in;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    Tensor t = c.constant && i == 0 ? full(c.shapes[i], 1.5, kFloat64)
                                    : randn(c.shapes[i], kFloat64, &gen);
    in.push_back(t.to(dtype).to(device).requires_grad_(true));
  }
  std::vector<Tensor> running = make_running(c, dtype, device);
  Tensor out = c.fn(in, running);
  Generator wgen(78);
  out.backward(randn(out.shape(), kFloat64, &wgen).to(dtype).to(device));
  std::vector<Tensor> result{out.detach().to(cpu())};
  for (auto& t : in) result.push_back(t.grad().to(cpu()));
  for (auto& t : running) result.push_back(t.to(cpu()));
  return result;
}

class PoolNormCuda : public ::testing::TestWithParam<std::tuple<PoolNormCase, DType>> {};

TEST_P(PoolNormCuda, MatchesTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto& [c, dtype] = GetParam();
  const auto gpu = run_on(c, dtype, kCuda0);
  const auto host = run_on(c, dtype, cpu());
  ASSERT_EQ(gpu.size(), host.size());
  const bool pool = c.name.find("Pool") != std::string::npos;
  const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    EXPECT_EQ(gpu[i].dtype(), dtype);
    if (pool)
      EXPECT_TRUE(BitEqual(gpu[i], host[i])) << "result " << i;
    else
      EXPECT_TRUE(AllClose(gpu[i], host[i], tol, tol)) << "result " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PoolNorm, PoolNormCuda,
                         ::testing::Combine(::testing::ValuesIn(all_pool_norm_cases()),
                                            ::testing::Values(kFloat32, kFloat64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// A channel larger than one block's threads (several strided elements per thread) and many
// planes: the block reduction and the grid-stride loops beyond their first round.
TEST(PoolNormCudaLarge, BatchNormAndPoolsOnLargeInputs) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::vector<PoolNormCase> big = {
      cases_detail::pool("max", {8, 16, 33, 31}, {3, 3}, Size2{2, 2}, {1, 1}, true),
      cases_detail::pool("avg", {8, 16, 33, 31}, {3, 2}, Size2{1, 2}, {1, 1}, false),
      cases_detail::adaptive("adaptive", {8, 16, 33, 31}, {5, 7}),
      cases_detail::bn("bn", {16, 8, 17, 19}, true, true, true, true),
      cases_detail::bn("bn_eval", {16, 8, 17, 19}, true, true, true, false),
  };
  for (const auto& c : big) {
    const auto gpu = run_on(c, kFloat32, kCuda0);
    const auto host = run_on(c, kFloat32, cpu());
    for (std::size_t i = 0; i < gpu.size(); ++i)
      EXPECT_TRUE(AllClose(gpu[i], host[i], 1e-4, 1e-4)) << c.name << " result " << i;
  }
}

TEST(PoolNormCudaErrors, MixedDevicesAreRefused) {
  LOCKSTEP_REQUIRE_CUDA();
  const Tensor x = randn({2, 3, 4, 4}).to(kCuda0);
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), ones({3}), Tensor(), true), DeviceError);
  EXPECT_THROW(batch_norm(x, zeros({3}), ones({3}), Tensor(), Tensor(), false), DeviceError);
}

}  // namespace
}  // namespace lockstep::testing
