// nll_loss and the 'sum'/'none' reductions of cross_entropy and mse_loss (lockstep/ops/loss.h)
// against torch's definitions, and their bad input. Gradients: gradcheck_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lockstep/lockstep.h"
#include "lockstep/ops/loss.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

Tensor f64(std::vector<double> v, Shape s) { return tensor(std::span<const double>(v), s); }
Tensor i64(std::vector<std::int64_t> v) {
  return tensor(std::span<const std::int64_t>(v), {static_cast<std::int64_t>(v.size())});
}

TEST(NllLoss, ReductionsAndIgnoredTargets) {
  // torch.nn.functional.nll_loss(x, t, reduction=...) with x = [[-1, -2], [-3, -4], [-5, -6]],
  // t = [1, -100, 0]: per row [2, 0, 5]; sum 7; mean 7 / 2 (the ignored row does not count).
  const Tensor x = f64({-1, -2, -3, -4, -5, -6}, {3, 2});
  const Tensor t = i64({1, -100, 0});
  EXPECT_EQ(nll_loss(x, t, -100, Reduction::None).to_vector<double>(),
            (std::vector<double>{2, 0, 5}));
  EXPECT_EQ(nll_loss(x, t, -100, Reduction::Sum).item(), 7.0);
  EXPECT_EQ(nll_loss(x, t).item(), 3.5);
  EXPECT_TRUE(std::isnan(nll_loss(x, i64({-100, -100, -100})).item()));
  EXPECT_EQ(nll_loss(f64({-1, -2}, {2}), scalar_tensor(1, TensorOptions(kInt64))).item(), 2.0);
  // cross_entropy = nll_loss(log_softmax): its 'sum' is 'mean' times the count.
  const Tensor logits = f64({0.5, -1, 2, 0.25, 1, -3}, {2, 3});
  const Tensor tt = i64({2, 0});
  EXPECT_NEAR(cross_entropy(logits, tt, -100, Reduction::Sum).item(),
              2 * cross_entropy(logits, tt).item(), 1e-12);
  EXPECT_EQ(cross_entropy(logits, tt, -100, Reduction::None).shape(), (Shape{2}));
  EXPECT_EQ(mse_loss(f64({1, 2}, {2}), f64({3, 2}, {2}), Reduction::None).to_vector<double>(),
            (std::vector<double>{4, 0}));
  EXPECT_EQ(mse_loss(f64({1, 2}, {2}), f64({3, 5}, {2}), Reduction::Sum).item(), 13.0);
}

TEST(NllLoss, BadInputAsTorch) {
  const Tensor x = f64({-1, -2, -3, -4}, {2, 2});
  expect_error<IndexError>([&] { nll_loss(x, i64({0, 2})); },
                          {"Target 2 is out of bounds", "row 1"});
  expect_error<ShapeError>([&] { nll_loss(x, i64({0})); }, {"nll_loss", "[1]", "[2, 2]"});
  expect_error<ShapeError>([] { nll_loss(zeros({2, 2, 2}), i64({0, 1})); }, {"nll_loss", "[N, C]"});
  expect_error<DTypeError>([&] { nll_loss(x, x); }, {"int64"});
  expect_error<DTypeError>([] { nll_loss(ones({2, 2}, TensorOptions(kInt64)), i64({0, 1})); },
                          {"nll_loss"});
  expect_error<ValueError>([] { reduction_from("avg"); }, {"avg is not a valid value for reduction"});
  expect_error<ShapeError>([] { mse_loss(ones({2}), ones({3}), Reduction::Sum); }, {"same shape"});
}

}  // namespace
}  // namespace lockstep::testing
