// Gradient destinations (autograd::set_grad_destination): linear's weight gradient is written
// straight into the destination, which AccumulateGrad adopts as .grad; a weight used twice still
// gets the sum; a leaf that already has a .grad keeps accumulating as usual.
#include <gtest/gtest.h>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

TEST(GradDestination, LinearWritesTheWeightGradientIntoItAndItBecomesTheGrad) {
  manual_seed(0);
  Tensor x = randn({5, 4});
  Tensor w = randn({3, 4}).requires_grad_(true);
  Tensor b = randn({3}).requires_grad_(true);
  // expected: the same computation without a destination
  Tensor w2 = w.detach().clone().requires_grad_(true);
  sum(linear(x, w2, b.detach())).backward();

  Tensor buffer = full({20}, 7.0);  // stale values: the formula must overwrite them
  Tensor dest = narrow(buffer, 0, 4, 12).reshape({3, 4});
  autograd::set_grad_destination(w, dest);
  sum(linear(x, w, b)).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().raw_data(), dest.raw_data());  // adopted, not copied
  EXPECT_TRUE(BitEqual(w.grad(), w2.grad()));
  EXPECT_EQ(buffer.to_vector<float>()[0], 7.f);  // outside the destination: untouched
  EXPECT_EQ(buffer.to_vector<float>()[19], 7.f);
  // Taken once: a second backward accumulates into .grad as usual.
  sum(linear(x, w, b)).backward();
  EXPECT_TRUE(AllClose(w.grad(), mul(w2.grad(), 2.0)));
  autograd::set_grad_destination(w, Tensor());
}

TEST(GradDestination, AWeightUsedTwiceGetsTheSumOfBothUses) {
  manual_seed(1);
  Tensor x = randn({5, 4});
  Tensor w = randn({4, 4}).requires_grad_(true);
  Tensor w2 = w.detach().clone().requires_grad_(true);
  sum(linear(relu(linear(x, w2)), w2)).backward();
  Tensor dest = zeros({4, 4});
  autograd::set_grad_destination(w, dest);
  sum(linear(relu(linear(x, w)), w)).backward();
  EXPECT_TRUE(AllClose(w.grad(), w2.grad()));
  autograd::set_grad_destination(w, Tensor());
}

TEST(GradDestination, ALeafWithAGradAccumulatesAndTheDestinationIsUntouched) {
  Tensor x = ones({2, 3});
  Tensor w = ones({2, 3}).requires_grad_(true);
  w.set_grad(full({2, 3}, 1.0));
  Tensor dest = full({2, 3}, -5.0);
  autograd::set_grad_destination(w, dest);
  sum(linear(x, w)).backward();  // dW = [[2, 2, 2], [2, 2, 2]]
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(6, 3.f));
  EXPECT_EQ(dest.to_vector<float>(), std::vector<float>(6, -5.f));
  autograd::set_grad_destination(w, Tensor());
}

TEST(GradDestination, AMismatchedDestinationIsAShapeError) {
  Tensor w = ones({2, 3}).requires_grad_(true);
  expect_error<ShapeError>([&] { autograd::set_grad_destination(w, zeros({3, 2})); },
                           {"[3, 2]", "[2, 3]"});
  expect_error<ShapeError>(
      [&] { autograd::set_grad_destination(w, zeros({2, 3}, kFloat64)); }, {"float64"});
}

}  // namespace
}  // namespace lockstep::testing
