// backward(gradient): the gradient must have the output's shape and dtype (torch: "Mismatch in
// shape: grad_output[0] has a shape of ... and output[0] has a shape of ...", "Mismatch in dtype").
#include <gtest/gtest.h>

#include <string>

#include "lockstep/lockstep.h"

namespace lockstep::testing {
namespace {

template <class E>
std::string message_of(const Tensor& out, const Tensor& grad) {
  try {
    out.backward(grad);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "backward(gradient) did not throw";
  return {};
}

TEST(BackwardGradient, RefusesAnotherDType) {
  Tensor x = ones({2}, TensorOptions().requires_grad(true));
  Tensor y = mul(x, 2.0);
  std::string msg = message_of<DTypeError>(y, ones({2}, kInt64));
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
  msg = message_of<DTypeError>(y, ones({2}, kFloat64));
  EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  EXPECT_FALSE(x.grad().defined());  // nothing reached the leaf
  y.backward(ones({2}));
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(BackwardGradient, RefusesAnotherShapeNamingBoth) {
  Tensor x = ones({2, 3}, TensorOptions().requires_grad(true));
  Tensor y = mul(x, 2.0);
  std::string msg = message_of<ShapeError>(y, ones({3, 2}));
  EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  msg = message_of<ShapeError>(sum(y), ones({1}));  // 0-d output, 1-element gradient
  EXPECT_NE(msg.find("[1]"), std::string::npos) << msg;
  EXPECT_FALSE(x.grad().defined());
}

}  // namespace
}  // namespace lockstep::testing
