// max_pool2d, avg_pool2d, adaptive_avg_pool2d, batch_norm and flatten by hand: exact values of
// small pools (ties, NaN, padding), batch_norm of a known [2, 2] input with its running
// statistics after one update (unbiased variance), eval mode; every bad input's typed error
// naming the shapes; running statistics left untouched in eval and when a check fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>

#include "pool_norm_cases.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using ops::KernelMode;
using ops::KernelModeGuard;

Tensor t64(std::vector<double> v, Shape s) { return tensor(std::span<const double>(v), s); }
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// ---- hand-computed values --------------------------------------------------------------------

const std::vector<double> k4x4 = {1, 5, 2, 0, 3, 4, 9, 9, 7, 7, 1, 2, 0, 6, 8, 3};

TEST(MaxPoolByHand, FourByFourKernelTwo) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Tensor x = t64(k4x4, {1, 1, 4, 4}).requires_grad_(true);
    Tensor y = max_pool2d(x, {2, 2});
    EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
    EXPECT_EQ(vals(y), (std::vector<double>{5, 9, 7, 8}));
    y.backward(t64({1, 2, 3, 4}, {1, 1, 2, 2}));
    // 9 ties at (1,2) and (1,3), 7 at (2,0) and (2,1): the first of each gets the gradient
    EXPECT_EQ(vals(x.grad()),
              (std::vector<double>{0, 1, 0, 0, 0, 0, 2, 0, 3, 0, 0, 0, 0, 0, 4, 0}));
  }
}

TEST(MaxPoolByHand, ConstantInputSendsTheGradientToEachWindowsFirstElement) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Tensor x = full({1, 1, 4, 4}, 2.0, kFloat64).requires_grad_(true);
    sum(max_pool2d(x, {3, 3}, Size2{1, 1})).backward();  // windows at (0,0) (0,1) (1,0) (1,1)
    EXPECT_EQ(vals(x.grad()),
              (std::vector<double>{1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
    // padded: the first in-image element of each window, rows {0}, {1, 2} and columns alike
    Tensor z = full({1, 1, 3, 3}, 2.0, kFloat64).requires_grad_(true);
    Tensor y = max_pool2d(z, {2, 2}, std::nullopt, {1, 1});
    EXPECT_EQ(vals(y), (std::vector<double>{2, 2, 2, 2}));
    sum(y).backward();
    EXPECT_EQ(vals(z.grad()), (std::vector<double>{1, 1, 0, 1, 1, 0, 0, 0, 0}));
  }
}

TEST(MaxPoolByHand, NaNIsTheMaximumAndTheLastNaNTakesTheGradient) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    // window 0: 1 NaN 3 NaN; window 1: all −inf (index: the first element)
    Tensor x = t64({1, nan, -inf, -inf, 3, nan, -inf, -inf}, {1, 2, 4}).requires_grad_(true);
    Tensor y = max_pool2d(x, {2, 2});
    const auto v = vals(y);
    ASSERT_EQ(v.size(), 2u);
    EXPECT_TRUE(std::isnan(v[0]));
    EXPECT_EQ(v[1], -inf);
    y.backward(t64({1, 2}, {1, 1, 2}));
    EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 0, 2, 0, 0, 1, 0, 0}));
  }
}

TEST(MaxPoolByHand, Float32NaNInfAndTiesAgreeWithTheReferenceFourWindowsAtATime) {
  // float32 rows of 11 windows (the fast kernel's four-at-a-time path, then a tail of 3) drawn
  // from a few values with NaNs, infinities and ties: the same maxima (NaN where the reference
  // has one) and the same winners (the gradient lands on the same elements).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float pool[] = {nan, -inf, inf, 1.0f, 1.0f, -2.0f, 0.0f, -0.0f, 3.5f};
  std::vector<float> v(2 * 3 * 6 * 22);
  std::uint64_t state = 12345;
  for (float& e : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    e = pool[(state >> 33) % 9];
  }
  std::vector<std::vector<double>> y, g;
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Tensor x = tensor(std::span<const float>(v), {2, 3, 6, 22}).requires_grad_(true);
    Tensor out = max_pool2d(x, {2, 2});
    ASSERT_EQ(out.shape(), (Shape{2, 3, 3, 11}));
    out.backward(arange(0, static_cast<double>(out.numel()), 1, kFloat32).reshape(out.shape()) + 1);
    y.push_back(vals(out));
    g.push_back(vals(x.grad()));
  }
  ASSERT_EQ(y[0].size(), y[1].size());
  for (std::size_t i = 0; i < y[0].size(); ++i)
    EXPECT_TRUE(std::isnan(y[1][i]) ? std::isnan(y[0][i]) : y[0][i] == y[1][i]) << "output " << i;
  EXPECT_EQ(g[0], g[1]);
}

TEST(AvgPoolByHand, FourByFourAndZeroPaddingCounted) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    EXPECT_EQ(vals(avg_pool2d(t64(k4x4, {1, 1, 4, 4}), {2, 2})),
              (std::vector<double>{3.25, 5, 5, 3.5}));
    Tensor x = t64({1, 2, 3, 4}, {1, 1, 2, 2}).requires_grad_(true);
    Tensor y = avg_pool2d(x, {3, 3}, Size2{1, 1}, {1, 1});  // every window holds all four
    EXPECT_TRUE(AllClose(vals(y), std::vector<double>(4, 10.0 / 9), 1e-15, 0));
    sum(y).backward();
    EXPECT_TRUE(AllClose(vals(x.grad()), std::vector<double>(4, 4.0 / 9), 1e-15, 0));
  }
}

TEST(AdaptiveAvgPoolByHand, BinsThatOverlap) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Tensor x = t64({1, 2, 3, 4, 5}, {1, 1, 1, 5}).requires_grad_(true);
    Tensor y = adaptive_avg_pool2d(x, {1, 3});  // bins [0, 2), [1, 4), [3, 5)
    EXPECT_EQ(vals(y), (std::vector<double>{1.5, 3, 4.5}));
    sum(y).backward();
    EXPECT_TRUE(
        AllClose(vals(x.grad()), {0.5, 0.5 + 1.0 / 3, 1.0 / 3, 1.0 / 3 + 0.5, 0.5}, 1e-15, 0));
  }
}

// x [2, 2]: channel 0 = {1, 3} (mean 2, biased var 1, unbiased 2), channel 1 = {2, 6} (mean 4,
// biased var 4, unbiased 8); eps 0 so the numbers are exact.
TEST(BatchNormByHand, TrainingTwoByTwo) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Tensor x = t64({1, 2, 3, 6}, {2, 2}).requires_grad_(true);
    Tensor w = t64({2, 3}, {2}).requires_grad_(true);
    Tensor b = t64({0.5, -1}, {2}).requires_grad_(true);
    Tensor rm = t64({0, 0}, {2}), rv = t64({1, 1}, {2});
    Tensor y = batch_norm(x, rm, rv, w, b, true, 0.1, 0.0);
    EXPECT_EQ(vals(y), (std::vector<double>{-1.5, -4, 2.5, 2}));  // x̂ = ±1, ·w + b
    EXPECT_TRUE(AllClose(vals(rm), {0.2, 0.4}, 1e-15, 0));        // 0.1·mean
    EXPECT_TRUE(AllClose(vals(rv), {1.1, 1.7}, 1e-15, 0));        // 0.9 + 0.1·unbiased
    y.backward(t64({1, 2, 3, 5}, {2, 2}));
    // two values per channel normalize to ±1 whatever x is: no gradient reaches x
    EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 0, 0, 0}));
    EXPECT_EQ(vals(w.grad()), (std::vector<double>{2, 3}));  // Σ dy·x̂
    EXPECT_EQ(vals(b.grad()), (std::vector<double>{4, 7}));  // Σ dy
    // momentum 1: the running statistics become the batch's (unbiased variance)
    batch_norm(x.detach(), rm, rv, Tensor(), Tensor(), true, 1.0, 0.0);
    EXPECT_EQ(vals(rm), (std::vector<double>{2, 4}));
    EXPECT_EQ(vals(rv), (std::vector<double>{2, 8}));
  }
}

TEST(BatchNormByHand, EvalUsesTheRunningStatisticsAndLeavesThemAlone) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Tensor x = t64({1, 2, 3, 6}, {2, 2}).requires_grad_(true);
    Tensor rm = t64({1, 2}, {2}), rv = t64({4, 0.25}, {2});
    Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), false, 0.1, 0.0);
    EXPECT_EQ(vals(y), (std::vector<double>{0, 0, 1, 8}));
    EXPECT_EQ(vals(rm), (std::vector<double>{1, 2}));
    EXPECT_EQ(vals(rv), (std::vector<double>{4, 0.25}));
    rv.fill_(100.0);  // after the call: the saved statistics, not these, drive backward
    sum(y).backward();
    EXPECT_EQ(vals(x.grad()), (std::vector<double>{0.5, 2, 0.5, 2}));
  }
}

TEST(BatchNormByHand, Float32StatisticsAreAccumulatedInDouble) {
  // 1e4 and 1e4 + 0.25 alternating: a float running sum (ulp 4 near 4e7) would lose the
  // quarters; the double sum is exact, so mean, variance and y are too
  std::vector<double> v;
  for (int i = 0; i < 4096; ++i) v.push_back(1e4 + (i % 2 ? 0.25 : 0.0));
  Tensor x = t64(v, {4096, 1}).to(kFloat32);
  Tensor rm = zeros({1}), rv = zeros({1});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 1.0, 0.0);
  EXPECT_EQ(rm.item<float>(), 10000.125f);
  EXPECT_NEAR(rv.item<double>(), 0.015625 * 4096 / 4095, 1e-9);
  EXPECT_TRUE(AllClose(vals(narrow(y, 0, 0, 2)), {-1, 1}, 1e-6, 0));
}

// ---- errors ----------------------------------------------------------------------------------

TEST(PoolErrors, TypedAndNamingTheShapes) {
  const Tensor x = zeros({1, 2, 4, 4});
  expect_error<ShapeError>([&] { max_pool2d(zeros({4, 4}), {2, 2}); }, {"max_pool2d", "[4, 4]"});
  expect_error<ShapeError>(
      [&] {
        avg_pool2d(zeros({1, 1, 1, 4, 4}), {2, 2});
      },
      {"avg_pool2d", "[1, 1, 1, 4, 4]"});
  expect_error<ShapeError>([&] { max_pool2d(zeros({2, 0, 4, 4}), {2, 2}); }, {"[2, 0, 4, 4]"});
  expect_error<ShapeError>(
      [&] {
        max_pool2d(zeros({1, 1, 2, 2}), {3, 3});
      },
      {"[1, 1, 2, 2]", "kernel (3, 3)"});
  expect_error<ValueError>([&] { max_pool2d(x, {0, 2}); }, {"kernel", "(0, 2)"});
  expect_error<ValueError>([&] { avg_pool2d(x, {2, 2}, Size2{2, 0}); }, {"stride", "(2, 0)"});
  expect_error<ValueError>(
      [&] {
        max_pool2d(x, {3, 3}, std::nullopt, {2, 1});
      },
      {"padding (2, 1)", "half the kernel (3, 3)"});
  expect_error<ValueError>([&] { avg_pool2d(x, {2, 2}, std::nullopt, {-1, 0}); }, {"(-1, 0)"});
  expect_error<DTypeError>([&] { max_pool2d(zeros({1, 1, 4, 4}, kInt64), {2, 2}); }, {"int64"});
  expect_error<ShapeError>(
      [&] {
        adaptive_avg_pool2d(zeros({16}), {2, 2});
      },
      {"adaptive_avg_pool2d", "[16]"});
  expect_error<ShapeError>(
      [&] {
        adaptive_avg_pool2d(zeros({1, 1, 0, 3}), {1, 1});
      },
      {"[1, 1, 0, 3]"});
  expect_error<ValueError>([&] { adaptive_avg_pool2d(x, {0, 2}); }, {"(0, 2)", "[1, 2, 4, 4]"});
}

TEST(BatchNormErrors, TypedNamingTheShapesAndRunningStatisticsUntouched) {
  const Tensor x = randn({2, 3, 2});
  Tensor rm = full({3}, 0.5), rv = full({3}, 2.0);
  auto untouched = [&] {
    EXPECT_EQ(vals(rm), std::vector<double>(3, 0.5));
    EXPECT_EQ(vals(rv), std::vector<double>(3, 2.0));
  };
  expect_error<ShapeError>([&] { batch_norm(zeros({3}), rm, rv, Tensor(), Tensor(), true); },
                           {"batch_norm", "[3]"});
  expect_error<ShapeError>(
      [&] {
        batch_norm(zeros({2, 3, 1, 1, 1}), rm, rv, Tensor(), Tensor(), true);
      },
      {"[2, 3, 1, 1, 1]"});
  expect_error<ShapeError>([&] { batch_norm(x, rm, rv, ones({4}), Tensor(), true); },
                           {"weight [4]", "[2, 3, 2]", "expected [3]"});
  expect_error<ShapeError>(
      [&] {
        batch_norm(x, rm, rv, Tensor(), ones({3, 1}), true);
      },
      {"bias [3, 1]"});
  expect_error<ShapeError>([&] { batch_norm(x, zeros({2}), rv, Tensor(), Tensor(), true); },
                           {"running_mean [2]"});
  expect_error<ValueError>(
      [&] {
        batch_norm(randn({1, 3}), rm, rv, Tensor(), Tensor(), true);
      },
      {"more than 1 value per channel", "[1, 3]"});
  expect_error<ValueError>(
      [&] {
        batch_norm(randn({1, 3, 1, 1}), rm, rv, Tensor(), Tensor(), true);
      },
      {"[1, 3, 1, 1]"});
  expect_error<ValueError>([&] { batch_norm(x, Tensor(), rv, Tensor(), Tensor(), false); },
                           {"running_mean", "[2, 3, 2]"});
  expect_error<DTypeError>([&] { batch_norm(x, rm, rv, ones({3}, kFloat64), Tensor(), true); },
                           {"float64"});
  expect_error<DeviceError>(
      [&] { batch_norm(x, rm, rv, ones({3}, Device(DeviceType::CPU, 1)), Tensor(), true); },
      {"cpu:1"});
  untouched();
  // eval (and a one-value batch, fine in eval) leaves them alone too
  batch_norm(randn({1, 3}), rm, rv, Tensor(), Tensor(), false);
  batch_norm(x, rm, rv, ones({3}), zeros({3}), false);
  untouched();
  // an empty batch neither normalizes nor updates (PyTorch's numel() == 0 path)
  Tensor e = batch_norm(zeros({0, 3, 2}), rm, rv, Tensor(), Tensor(), true);
  EXPECT_EQ(e.shape(), (Shape{0, 3, 2}));
  untouched();
}

// ---- flatten -----------------------------------------------------------------------------------

TEST(Flatten, MergesTheDimsAndRoutesTheGradient) {
  Tensor x = randn({2, 3, 4, 5}).requires_grad_(true);
  EXPECT_EQ(flatten(x).shape(), (Shape{120}));
  EXPECT_EQ(flatten(x, 1).shape(), (Shape{2, 60}));
  EXPECT_EQ(flatten(x, 1, 2).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(flatten(x, -2, -1).shape(), (Shape{2, 3, 20}));
  EXPECT_EQ(flatten(x, 2, 2).shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(flatten(full({}, 3.0)).shape(), (Shape{1}));
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 60}));
  EXPECT_EQ(vals(flatten(x, 1)), vals(x));
  sum(mul(flatten(x, 1), 2.0)).backward();
  EXPECT_EQ(vals(x.grad()), std::vector<double>(120, 2.0));
  EXPECT_THROW(flatten(x, 2, 1), IndexError);
  EXPECT_THROW(flatten(x, 0, 4), IndexError);
}

}  // namespace
}  // namespace lockstep::testing
