// The one tolerance rule of the test suite: |a - b| <= atol + rtol * |b| (numpy.allclose), with
// rtol 1e-5 and atol 1e-6 for float32 CPU results.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

inline bool allclose(double a, double b, double rtol = kRtol, double atol = kAtol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::abs(a - b) <= atol + rtol * std::abs(b);
}

/// gtest assertion: every element of `actual` is allclose to `expected`; reports the first
/// mismatch with its index.
inline ::testing::AssertionResult AllClose(const std::vector<double>& actual,
                                           const std::vector<double>& expected,
                                           double rtol = kRtol, double atol = kAtol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  for (std::size_t i = 0; i < actual.size(); ++i)
    if (!allclose(actual[i], expected[i], rtol, atol))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << actual[i] << " vs expected " << expected[i]
             << " (|diff| " << std::abs(actual[i] - expected[i]) << " > "
             << atol + rtol * std::abs(expected[i]) << ")";
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult AllClose(const Tensor& actual, const Tensor& expected,
                                           double rtol = kRtol, double atol = kAtol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shapes differ: " << actual.shape().str() << " vs "
                                         << expected.shape().str();
  return AllClose(actual.to_vector<double>(), expected.to_vector<double>(), rtol, atol);
}

/// Bitwise equality of two tensors (same shape and dtype, same bits), except that any two NaNs are
/// equal: IEEE 754 leaves a NaN result's sign and payload unspecified, and they change with the
/// compiler's operation order (an ASan -O1 build gave -nan where -O2 gave nan).
inline ::testing::AssertionResult BitEqual(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "shape/dtype differ";
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(std::isnan(va[i]) && std::isnan(vb[i])) &&
        std::memcmp(&va[i], &vb[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  return ::testing::AssertionSuccess();
}

/// A fast kernel's result against the reference kernel's (tests/ops/kernel_agreement_test.cpp's
/// rule): rtol `tol` plus atol = tol × the largest reference magnitude, since a float sum in
/// another order differs by about u·√K·(size of its terms) even where the result cancels to
/// near 0. Both undefined (no gradient in either mode) agree.
inline ::testing::AssertionResult AgreesWithReference(const Tensor& fast, const Tensor& ref,
                                                      double tol) {
  if (fast.defined() != ref.defined())
    return ::testing::AssertionFailure() << "defined in only one mode";
  if (!fast.defined()) return ::testing::AssertionSuccess();
  double mag = 0;
  for (double v : ref.to_vector<double>()) mag = std::max(mag, std::abs(v));
  return AllClose(fast, ref, tol, tol * std::max(mag, 1e-30));
}

}  // namespace lockstep::testing
