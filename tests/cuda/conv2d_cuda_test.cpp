// conv2d on cuda:0 (cuDNN, src/ops/cuda/conv.cpp) against the CPU op, over the table of
// tests/ops/conv_cases.h, float32 and float64: the output and the gradients of x, weight and
// bias. Tolerance: rtol and atol = tol × the largest CPU magnitude (cuDNN and OpenBLAS sum in
// different orders), tol 1e-5 in float32 (FMA math, no TF32), 1e-12 in float64. Also: two runs
// on the GPU give the same bits (fixed deterministic algorithms). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"
#include "ops/conv_cases.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);

// Output, then the gradients of x, weight and bias (undefined without bias), on `device`, for
// inputs and an upstream gradient drawn on the host (the same values for every device).
std::vector<Tensor> run(const ConvCase& c, DType dtype, Device device) {
  ConvInputs in = make_inputs(c, dtype, 91, device);
  Tensor y = run_conv(c, in);
  Generator gen(92);
  y.backward(randn(y.shape(), kFloat64, &gen).to(dtype).to(device));
  auto host = [](const Tensor& t) { return t.defined() ? t.to(cpu()) : Tensor(); };
  return {host(y.detach()), host(in.x.grad()), host(in.w.grad()),
          in.b.defined() ? host(in.b.grad()) : Tensor()};
}

::testing::AssertionResult agree(const Tensor& gpu, const Tensor& cpu_t, double tol) {
  if (gpu.defined() != cpu_t.defined())
    return ::testing::AssertionFailure() << "defined on one device only";
  if (!gpu.defined()) return ::testing::AssertionSuccess();
  double mag = 0;
  for (double v : cpu_t.to_vector<double>()) mag = std::max(mag, std::abs(v));
  return AllClose(gpu, cpu_t, tol, tol * std::max(mag, 1e-30));
}

class Conv2dCuda : public ::testing::TestWithParam<std::tuple<ConvCase, DType>> {};

TEST_P(Conv2dCuda, ForwardAndBackwardMatchTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto& [c, dtype] = GetParam();
  auto on_cpu = run(c, dtype, cpu());
  auto on_gpu = run(c, dtype, kCuda0);
  const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
  const char* names[] = {"output", "grad x", "grad weight", "grad bias"};
  for (std::size_t i = 0; i < on_cpu.size(); ++i)
    EXPECT_TRUE(agree(on_gpu[i], on_cpu[i], tol)) << names[i];
  EXPECT_EQ(on_gpu[0].shape(), expected_out(c));
}

TEST_P(Conv2dCuda, TwoRunsGiveTheSameBits) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto& [c, dtype] = GetParam();
  auto first = run(c, dtype, kCuda0);
  auto second = run(c, dtype, kCuda0);
  for (std::size_t i = 0; i < first.size(); ++i)
    if (first[i].defined()) {
      EXPECT_TRUE(BitEqual(first[i], second[i])) << "result " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Table, Conv2dCuda,
                         ::testing::Combine(::testing::ValuesIn(conv_cases()),
                                            ::testing::Values(kFloat32, kFloat64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// Mixed devices are refused before cuDNN is reached.
TEST(Conv2dCudaErrors, MixedDevicesAreDeviceErrors) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor x = zeros({1, 2, 4, 4}).to(kCuda0), w = zeros({3, 2, 3, 3});
  try {
    conv2d(x, w);
    ADD_FAILURE() << "no exception";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("same device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::testing
