// Tensor::str() of int64 tensors (every digit, as torch prints them) and arange's refusal of
// ranges that are not numbers (torch: "unsupported range: 0 -> nan").
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "lockstep/lockstep.h"

namespace lockstep::testing {
namespace {

TEST(TensorStr, Int64PrintsEveryDigit) {
  const std::int64_t big = (std::int64_t{1} << 62) + 1;
  const std::int64_t values[] = {big, -7, 0, std::numeric_limits<std::int64_t>::min()};
  Tensor t = tensor(std::span<const std::int64_t>(values));
  EXPECT_EQ(t.str(),
            "tensor([4611686018427387905, -7, 0, -9223372036854775808], shape=[4], dtype=int64, "
            "device=cpu:0)");
}

TEST(TensorStr, FloatsKeepTheirFormat) {
  EXPECT_EQ(tensor({1.5f, -2.0f}).str(), "tensor([1.5, -2], shape=[2], dtype=float32, device=cpu:0)");
}

void expect_value_error(double start, double end, double step, const std::string& want) {
  try {
    arange(start, end, step, kFloat32);
    ADD_FAILURE() << "arange(" << start << ", " << end << ", " << step << ") did not throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

TEST(Arange, RefusesRangesThatAreNotFinite) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  expect_value_error(0, nan, 1, "unsupported range: 0 -> nan");
  expect_value_error(0, nan, 1, "end");
  expect_value_error(0, inf, 1, "unsupported range: 0 -> inf");
  expect_value_error(nan, 3, 1, "start");
  expect_value_error(-inf, 3, 1, "start");
  expect_value_error(0, 3, nan, "step");
  expect_value_error(0, 3, inf, "step");
  EXPECT_THROW(arange(0, 1e300, 1e-300), ValueError);  // finite, but more elements than int64
  EXPECT_EQ(arange(0, 3, 1, kFloat32).numel(), 3);
}

}  // namespace
}  // namespace lockstep::testing
