// The float32 exp, erf and Φ of src/ops/float_math.h (the exact GELU's float32 bodies on the CPU
// and the GPU) against the C library in double, in ulp of the float result, on dense grids; and
// the float32 GELU op against the float64 one. The bounds are the measured maxima rounded up
// (float_math.h's header states them).
#include "ops/float_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

namespace sh = kernels::shared;

// |got − want| in units of the float spacing at want (the smallest normal's below it).
double ulp_error(float got, double want) {
  const float w = static_cast<float>(want);
  const double spacing = std::nextafter(std::max(std::fabs(w), std::numeric_limits<float>::min()),
                                        std::numeric_limits<float>::infinity()) -
                         std::max(std::fabs(w), std::numeric_limits<float>::min());
  return std::fabs(static_cast<double>(got) - want) / spacing;
}

// The largest ulp_error of f against ref over n + 1 evenly spaced floats in [lo, hi].
template <class F, class R>
double max_ulp(F f, R ref, double lo, double hi, int n) {
  double worst = 0;
  for (int i = 0; i <= n; ++i) {
    const float x = static_cast<float>(lo + (hi - lo) * i / n);
    worst = std::max(worst, ulp_error(f(x), ref(static_cast<double>(x))));
  }
  return worst;
}

TEST(FloatMath, ExpIsWithinOneUlpAndFlushesBelowMinus87) {
  EXPECT_LE(max_ulp(sh::exp_f, [](double x) { return std::exp(x); }, -87, 0, 200000), 1.0);
  EXPECT_EQ(sh::exp_f(0.0f), 1.0f);
  EXPECT_EQ(sh::exp_f(-87.5f), 0.0f);
  EXPECT_EQ(sh::exp_f(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(sh::exp_f(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FloatMath, ErfIsWithinThreeUlp) {
  auto ref = [](double x) { return std::erf(x); };
  EXPECT_LE(max_ulp(sh::erf_f, ref, -6, 6, 400000), 3.0);
  EXPECT_LE(max_ulp(sh::erf_f, ref, -1e-3, 1e-3, 20000), 1.0);  // the series near 0
  EXPECT_EQ(sh::erf_f(0.0f), 0.0f);
  EXPECT_EQ(sh::erf_f(10.0f), 1.0f);
  EXPECT_EQ(sh::erf_f(-std::numeric_limits<float>::infinity()), -1.0f);
}

TEST(FloatMath, NormalCdfKeepsItsRelativeAccuracyInTheTail) {
  auto ref = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  EXPECT_LE(max_ulp(sh::normal_cdf_f, ref, -4, 8, 400000), 32.0);
  EXPECT_LE(max_ulp(sh::normal_cdf_f, ref, -0.7, 8, 200000), 3.0);
  EXPECT_EQ(sh::normal_cdf_f(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(sh::normal_cdf_f(-std::numeric_limits<float>::infinity()), 0.0f);
}

// gelu in float32 (float_math.h, vectorised on the CPU) against gelu in float64 (the C library),
// forward and backward, over x in [−10, 10]: relative 4e-6 (the tail's Φ) plus 1e-7 absolute.
TEST(FloatMath, Float32GeluAgreesWithFloat64Gelu) {
  Tensor x64 = arange(-10.0, 10.0, 5e-4, kFloat64).requires_grad_();  // 40,000 elements
  Tensor x32 = x64.detach().to(kFloat32).requires_grad_();
  Tensor g64 = arange(-2.0, 3.0, 1.25e-4, kFloat64);
  Tensor y64 = gelu(x64), y32 = gelu(x32);
  y64.backward(g64);
  y32.backward(g64.to(kFloat32));
  EXPECT_TRUE(AllClose(y32.detach(), y64.detach(), 4e-6, 1e-7));
  EXPECT_TRUE(AllClose(x32.grad(), x64.grad(), 4e-6, 1e-7));
}

}  // namespace
}  // namespace lockstep::testing
