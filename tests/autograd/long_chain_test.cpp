// Very long autograd chains (an RNN unrolled far, a Python loop of small ops): freeing the graph
// must not recurse once per node (Node -> Edge -> Node ... overflowed the stack), and backward
// through it must not either.
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"

namespace lockstep::testing {
namespace {

TEST(AutogradLongChain, FreeingAMillionOpChainDoesNotOverflowTheStack) {
  Tensor x = ones({2}, TensorOptions().requires_grad(true));
  Tensor y = x;
  for (int i = 0; i < 1'000'000; ++i) y = add(y, 0.0);
  ASSERT_NE(y.grad_fn(), nullptr);
  y = Tensor();  // drops the last reference to the chain's head: 1,000,000 nodes freed
  // the graph's leaf end survives and can be used again
  sum(mul(x, 3.0)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

TEST(AutogradLongChain, BackwardThroughAHalfMillionOpChain) {
  Tensor x = ones({2}, TensorOptions().requires_grad(true));
  Tensor y = x;
  for (int i = 0; i < 500'000; ++i) y = add(y, 0.0);
  sum(y).backward();  // the graph is released by this backward and freed below
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1}));
  y = Tensor();
}

// A chain whose nodes are also kept by a second owner is freed only when both let go.
TEST(AutogradLongChain, NodesSharedWithAnotherGraphSurvive) {
  Tensor x = ones({2}, TensorOptions().requires_grad(true));
  Tensor mid = x;
  for (int i = 0; i < 1000; ++i) mid = add(mid, 0.0);
  Tensor a = mul(mid, 2.0);
  Tensor b = mul(mid, 5.0);
  mid = Tensor();
  a = Tensor();  // frees a's node; the chain stays alive through b
  sum(b).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 5}));
}

}  // namespace
}  // namespace lockstep::testing
