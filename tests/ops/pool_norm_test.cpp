// max_pool2d, avg_pool2d, adaptive_avg_pool2d and batch_norm (lockstep/ops/pool.h,
// batch_norm.h) over the tables of pool_norm_cases.h:
//   - float64 central-difference gradient checks of every input (x, weight, bias), eps 1e-6;
//   - the reference kernels against the fast ones, float32 and float64, forward, every
//     gradient and the running statistics (pools bit for bit: both add in the same order);
//   - the fast kernels give the same bits on 1 and 2 intra-op threads;
// the hand-computed values and the errors are in pool_norm_values_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "pool_norm_cases.h"
#include "support/gradcheck.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using ops::KernelMode;
using ops::KernelModeGuard;
using Inputs = std::vector<Tensor>;

Tensor t64(std::vector<double> v, Shape s) { return tensor(std::span<const double>(v), s); }
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// Inputs of a case: randn (float64 draws, seeded), or all 1.5 for a constant case.
Inputs make_inputs(const PoolNormCase& c, DType dtype, std::uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    Tensor t = c.constant && i == 0 ? full(c.shapes[i], 1.5, kFloat64)
                                    : randn(c.shapes[i], kFloat64, &gen);
    in.push_back(t.to(dtype).requires_grad_(true));
  }
  return in;
}

// ---- float64 gradient check ------------------------------------------------------------------

::testing::AssertionResult gradcheck(const PoolNormCase& c) {
  Inputs in = make_inputs(c, kFloat64, 2024);
  const Inputs running = make_running(c, kFloat64, Device());
  std::vector<Tensor*> leaves;
  for (Tensor& t : in) leaves.push_back(&t);
  Generator gen(7);
  return testing::gradcheck([&] { return c.fn(in, running); }, leaves, gen);
}

class PoolNormGradCheck : public ::testing::TestWithParam<PoolNormCase> {};

TEST_P(PoolNormGradCheck, AnalyticMatchesCentralDifferences) {
  EXPECT_TRUE(gradcheck(GetParam()));
}

// Every case but max pooling over ties, where max is not differentiable (its gradient rule,
// the first maximum, is checked by hand in pool_norm_values_test.cpp).
std::vector<PoolNormCase> differentiable_cases() {
  std::vector<PoolNormCase> out;
  for (const PoolNormCase& c : all_pool_norm_cases())
    if (!(c.constant && c.name.rfind("MaxPool", 0) == 0)) out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(PoolNorm, PoolNormGradCheck, ::testing::ValuesIn(differentiable_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- reference vs fast kernels ---------------------------------------------------------------

// Output, each input's gradient, then the running statistics after the call.
std::vector<Tensor> run(const PoolNormCase& c, DType dtype, KernelMode mode) {
  KernelModeGuard guard(mode);
  Inputs in = make_inputs(c, dtype, 77);
  Inputs running = make_running(c, dtype, Device());
  Tensor out = c.fn(in, running);
  Generator gen(78);
  out.backward(randn(out.shape(), kFloat64, &gen).to(dtype));
  std::vector<Tensor> result{out.detach()};
  for (auto& t : in) result.push_back(t.grad());
  for (auto& t : running) result.push_back(t);
  return result;
}

// |fast − ref| ≤ tol·|ref| + tol·max|ref| (kernel_agreement_test.cpp's rule).
::testing::AssertionResult agree(const Tensor& fast, const Tensor& ref, double tol) {
  double mag = 0;
  for (double v : vals(ref)) mag = std::max(mag, std::abs(v));
  return AllClose(fast, ref, tol, tol * std::max(mag, 1e-30));
}

class PoolNormKernels : public ::testing::TestWithParam<std::tuple<PoolNormCase, DType>> {};

TEST_P(PoolNormKernels, FastMatchesReference) {
  const auto& [c, dtype] = GetParam();
  const auto fast = run(c, dtype, KernelMode::Fast);
  const auto ref = run(c, dtype, KernelMode::Reference);
  ASSERT_EQ(fast.size(), ref.size());
  const bool pool = c.name.find("Pool") != std::string::npos;
  for (std::size_t i = 0; i < fast.size(); ++i) {
    ASSERT_TRUE(fast[i].defined() && ref[i].defined()) << i;
    EXPECT_EQ(fast[i].dtype(), dtype);
    if (pool)
      EXPECT_TRUE(BitEqual(fast[i], ref[i])) << "result " << i;
    else
      EXPECT_TRUE(agree(fast[i], ref[i], dtype == kFloat32 ? 1e-6 : 1e-14)) << "result " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PoolNorm, PoolNormKernels,
                         ::testing::Combine(::testing::ValuesIn(all_pool_norm_cases()),
                                            ::testing::Values(kFloat32, kFloat64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// Inputs large enough for the fast kernels to split their planes / channels over the team: the
// bits do not depend on the thread count.
TEST(PoolNormThreads, FastKernelsGiveTheSameBitsOnOneAndTwoThreads) {
  using cases_detail::bn;
  std::vector<PoolNormCase> big = {
      cases_detail::pool("max", {4, 8, 33, 31}, {3, 3}, Size2{2, 2}, {1, 1}, true),
      cases_detail::pool("avg", {4, 8, 33, 31}, {3, 2}, Size2{1, 2}, {1, 1}, false),
      cases_detail::adaptive("adaptive", {4, 8, 33, 31}, {5, 7}),
      bn("bn", {8, 16, 17, 19}, true, true, true, true),
  };
  const int saved = get_num_threads();
  for (const auto& c : big) {
    set_num_threads(1);
    const auto one = run(c, kFloat32, KernelMode::Fast);
    set_num_threads(2);
    const auto two = run(c, kFloat32, KernelMode::Fast);
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(BitEqual(one[i], two[i])) << c.name << " result " << i;
  }
  set_num_threads(saved);
}

}  // namespace
}  // namespace lockstep::testing
