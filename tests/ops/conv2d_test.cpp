// conv2d (lockstep/ops/conv.h) over the table of tests/ops/conv_cases.h: (a) a float64
// central-difference gradient check of x, weight and bias; (b) the fast kernels (im2col +
// GEMM) against the reference loops, float32 and float64, forward and backward, and the fast
// kernels' bits independent of the intra-op thread count; (c) hand-computed exact values on a
// 3×3 image. The bad inputs are in conv2d_errors_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "conv_cases.h"
#include "support/gradcheck.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using ops::KernelMode;
using ops::KernelModeGuard;

// ---- (a) gradient check ---------------------------------------------------------------------

// L = Σ conv(x, w, b) ⊙ R for a fixed random R; analytic gradients from backward() against
// (L(v + eps) − L(v − eps)) / (2 eps) for every element v of x, w and b, eps = 1e-6.
::testing::AssertionResult gradcheck(const ConvCase& c) {
  ConvInputs in = make_inputs(c, kFloat64, 2024);
  const Tensor out = run_conv(c, in);
  if (out.shape() != expected_out(c))
    return ::testing::AssertionFailure()
           << "output " << out.shape().str() << ", expected " << expected_out(c).str();
  std::vector<Tensor*> leaves{&in.x, &in.w};
  if (c.bias) leaves.push_back(&in.b);
  Generator gen(7);
  auto r = testing::gradcheck([&] { return run_conv(c, in); }, leaves, gen);
  if (!r) r << " (0 = x, 1 = weight, 2 = bias)";
  return r;
}

std::vector<ConvCase> small_cases() {
  std::vector<ConvCase> out;
  for (const auto& c : conv_cases())
    if (c.small) out.push_back(c);
  return out;
}

class Conv2dGradCheck : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dGradCheck, AnalyticMatchesCentralDifferences) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    EXPECT_TRUE(gradcheck(GetParam())) << (mode == KernelMode::Fast ? "fast" : "reference");
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Conv2dGradCheck, ::testing::ValuesIn(small_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- (b) fast kernels against the reference loops -------------------------------------------

// Output, then the gradients of x, weight and bias (undefined without bias), for one mode.
std::vector<Tensor> run(const ConvCase& c, DType dtype, KernelMode mode) {
  KernelModeGuard guard(mode);
  ConvInputs in = make_inputs(c, dtype, 77);
  Tensor out = run_conv(c, in);
  Generator gen(78);
  out.backward(randn(out.shape(), kFloat64, &gen).to(dtype));
  return {out.detach(), in.x.grad(), in.w.grad(), in.b.defined() ? in.b.grad() : Tensor()};
}

class Conv2dKernels : public ::testing::TestWithParam<std::tuple<ConvCase, DType>> {};

TEST_P(Conv2dKernels, FastMatchesReference) {
  const auto& [c, dtype] = GetParam();
  auto fast = run(c, dtype, KernelMode::Fast);
  auto ref = run(c, dtype, KernelMode::Reference);
  const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
  const char* names[] = {"output", "grad x", "grad weight", "grad bias"};
  for (std::size_t i = 0; i < fast.size(); ++i) {
    if (fast[i].defined()) EXPECT_EQ(fast[i].dtype(), dtype) << names[i];
    EXPECT_TRUE(AgreesWithReference(fast[i], ref[i], tol)) << names[i];
  }
  EXPECT_EQ(fast[0].shape(), expected_out(c));
}

// The fast kernels split samples (and GEMM columns) over the intra-op team; no bit may depend
// on how many threads there are (deterministic mode relies on it).
TEST_P(Conv2dKernels, FastBitsIndependentOfThreadCount) {
  const auto& [c, dtype] = GetParam();
  const int saved = get_num_threads();
  set_num_threads(1);
  auto one = run(c, dtype, KernelMode::Fast);
  set_num_threads(3);
  auto three = run(c, dtype, KernelMode::Fast);
  set_num_threads(saved);
  for (std::size_t i = 0; i < one.size(); ++i)
    if (one[i].defined()) {
      EXPECT_TRUE(BitEqual(one[i], three[i])) << "result " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Table, Conv2dKernels,
                         ::testing::Combine(::testing::ValuesIn(conv_cases()),
                                            ::testing::Values(kFloat32, kFloat64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// ---- (c) hand-computed values ----------------------------------------------------------------

Tensor image3x3(DType dtype, bool grad = true) {  // [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
  Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}).to(dtype);
  return grad ? x.requires_grad_(true) : x;
}

class Conv2dExact : public ::testing::TestWithParam<std::tuple<KernelMode, DType>> {};

// A 2×2 kernel [[1, 2], [3, 4]] with bias 0.5 on the 3×3 image: y[i, j] = x[i, j] + 2 x[i, j+1]
// + 3 x[i+1, j] + 4 x[i+1, j+1] + 0.5; for L = Σ y: ∂L/∂w[p, q] = Σ of the window at (p, q),
// ∂L/∂x = Σ of the kernel taps covering each pixel, ∂L/∂b = 4 (outputs).
TEST_P(Conv2dExact, TwoByTwoKernelOnThreeByThreeImage) {
  const auto [mode, dtype] = GetParam();
  KernelModeGuard guard(mode);
  Tensor x = image3x3(dtype);
  Tensor w = tensor({1, 2, 3, 4}, {1, 1, 2, 2}).to(dtype).requires_grad_(true);
  Tensor b = tensor({0.5f}, {1}).to(dtype).requires_grad_(true);
  Tensor y = conv2d(x, w, b);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{37.5, 47.5, 67.5, 77.5}));
  sum(y).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{12, 16, 24, 28}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 3, 2, 4, 10, 6, 3, 7, 4}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{4}));
}

// A 3×3 kernel of ones, padding 1, stride 2: the four corner neighbourhoods, zero outside.
TEST_P(Conv2dExact, PaddedStridedOnesKernel) {
  const auto [mode, dtype] = GetParam();
  KernelModeGuard guard(mode);
  Tensor x = image3x3(dtype);
  Tensor w = ones({1, 1, 3, 3}, TensorOptions(dtype)).requires_grad_(true);
  Tensor y = conv2d(x, w, Tensor(), {2, 2}, {1, 1});
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{12, 16, 24, 28}));
  sum(y).backward();
  // each pixel's count of windows covering it: corners 1, edges 2, centre 4
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  // tap (p, q) sees pixel (2i − 1 + p, 2j − 1 + q) for i, j in {0, 1}
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{5, 10, 5, 10, 20, 10, 5, 10, 5}));
}

// Dilation 2: a 2×2 kernel reaches the image's corners: 1·1 + 2·3 + 3·7 + 4·9 = 64.
TEST_P(Conv2dExact, DilatedKernelReachesCorners) {
  const auto [mode, dtype] = GetParam();
  KernelModeGuard guard(mode);
  Tensor w = tensor({1, 2, 3, 4}, {1, 1, 2, 2}).to(dtype);
  Tensor y = conv2d(image3x3(dtype, false), w, Tensor(), {1, 1}, {0, 0}, {2, 2});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{64}));
}

// Depthwise (groups = 2): channel 0 by its kernel of ones (sum of 2×2 windows), channel 1 by
// the kernel [[0, 0], [0, −1]] (minus the lower-right pixel); neither sees the other channel.
TEST_P(Conv2dExact, DepthwiseChannelsStaySeparate) {
  const auto [mode, dtype] = GetParam();
  KernelModeGuard guard(mode);
  Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60, 70, 80, 90}, {1, 2, 3, 3})
                 .to(dtype);
  Tensor w = tensor({1, 1, 1, 1, 0, 0, 0, -1}, {2, 1, 2, 2}).to(dtype);
  Tensor y = conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 1}, 2);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{12, 16, 24, 28, -50, -60, -80, -90}));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, Conv2dExact,
    ::testing::Combine(::testing::Values(KernelMode::Fast, KernelMode::Reference),
                       ::testing::Values(kFloat32, kFloat64)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == KernelMode::Fast ? "fast_" : "reference_") +
             to_string(std::get<1>(info.param));
    });

// Batch 0: output [0, C_out, H_out, W_out]; the weight and bias gradients are zero, not
// uninitialised (gradient destinations are filled by the kernel, not pre-zeroed).
TEST(Conv2dBatchZero, EmptyOutputAndZeroWeightGradient) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Tensor x = zeros({0, 3, 5, 4}).requires_grad_(true);
    Tensor w = full({2, 3, 3, 3}, 1.5).requires_grad_(true);
    Tensor b = full({2}, 2.0).requires_grad_(true);
    Tensor y = conv2d(x, w, b, {2, 1}, {1, 1});
    EXPECT_EQ(y.shape(), (Shape{0, 2, 3, 4}));
    sum(y).backward();
    EXPECT_EQ(x.grad().shape(), x.shape());
    EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(2 * 3 * 3 * 3, 0.0));
    EXPECT_EQ(b.grad().to_vector<double>(), std::vector<double>(2, 0.0));
  }
}

// Only the bias requires grad (over the weight gradient's chunk of 8 samples): the fast bias
// sum alone, against the reference; x and weight get no gradient.
TEST(Conv2dBiasOnly, FastBiasGradientMatchesReference) {
  std::vector<Tensor> grads;
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Generator gen(5);
    Tensor x = randn({19, 3, 6, 5}, kFloat64, &gen), w = randn({4, 3, 3, 3}, kFloat64, &gen);
    Tensor b = zeros({4}, TensorOptions(kFloat64)).requires_grad_(true);
    conv2d(x, w, b, {1, 1}, {1, 1}).backward(randn({19, 4, 6, 5}, kFloat64, &gen));
    EXPECT_FALSE(x.grad().defined());
    grads.push_back(b.grad());
  }
  EXPECT_TRUE(AllClose(grads[0], grads[1], 1e-12, 1e-12));
}

}  // namespace
}  // namespace lockstep::testing
