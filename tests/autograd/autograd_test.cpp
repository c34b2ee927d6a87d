// Autograd semantics (torch.autograd): accumulation into .grad, set-to-none zero_grad, no_grad,
// gradient summation over consumers, post-accumulate-grad hooks, misuse errors, detach.
#include <gtest/gtest.h>

#include <map>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

Tensor D(std::vector<double> v, Shape s = {}) {
  return tensor(std::span<const double>(v), s.size() ? s : Shape{static_cast<std::int64_t>(v.size())});
}
std::vector<double> V(const Tensor& t) { return t.to_vector<double>(); }

TEST(Autograd, GradientOfASimpleExpression) {
  Tensor x = D({1, -2, 3}).requires_grad_(true);
  Tensor y = D({4, 5, 6}).requires_grad_(true);
  sum(add(mul(x, y), mul(x, 2.0))).backward();  // d/dx = y + 2, d/dy = x
  EXPECT_EQ(V(x.grad()), (std::vector<double>{6, 7, 8}));
  EXPECT_EQ(V(y.grad()), (std::vector<double>{1, -2, 3}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(mul(x, y).is_leaf());
}

TEST(Autograd, GradAccumulatesAcrossBackwardCalls) {
  Tensor x = D({1, 2}).requires_grad_(true);
  sum(mul(x, x)).backward();  // 2x
  EXPECT_EQ(V(x.grad()), (std::vector<double>{2, 4}));
  sum(mul(x, 3.0)).backward();  // + 3
  EXPECT_EQ(V(x.grad()), (std::vector<double>{5, 7}));
}

TEST(Autograd, ZeroGradSetsGradToNone) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  sum(lin->forward(ones({4, 3}))).backward();
  ASSERT_TRUE(lin->weight.grad().defined());
  lin->zero_grad();
  EXPECT_FALSE(lin->weight.grad().defined());
  EXPECT_FALSE(lin->bias.grad().defined());
  sum(lin->forward(ones({4, 3}))).backward();  // starts afresh, not from zeros
  EXPECT_EQ(V(lin->bias.grad()), (std::vector<double>{4, 4}));
  optim::SGD opt(lin->parameters(), {.lr = 0.1});
  opt.zero_grad();
  EXPECT_FALSE(lin->weight.grad().defined());
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = D({1, 2}).requires_grad_(true);
  Tensor y;
  {
    no_grad guard;
    EXPECT_FALSE(GradMode::is_enabled());
    y = mul(exp(x), x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(linear(x.reshape({1, 2}), ones({3, 2}, kFloat64)).requires_grad());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_THROW(sum(y).backward(), AutogradError);
  EXPECT_TRUE(mul(x, 2.0).requires_grad());  // recording resumes after the guard
}

TEST(Autograd, GradientOfTwoConsumersIsSummed) {
  Tensor x = D({1, 2, 3}).requires_grad_(true);
  Tensor h = mul(x, 2.0);  // h feeds both branches
  Tensor out = add(sum(mul(h, h)), sum(exp(h)));
  out.backward();
  // d/dx = 2 * (2h + exp(h))
  std::vector<double> expected;
  for (double v : {1.0, 2.0, 3.0}) expected.push_back(2 * (4 * v + std::exp(2 * v)));
  EXPECT_TRUE(AllClose(V(x.grad()), expected, 1e-12, 0));
  Tensor y = D({3}).requires_grad_(true);
  add(y, y).backward();  // both operands are the same leaf
  EXPECT_EQ(V(y.grad()), (std::vector<double>{2}));
}

TEST(Autograd, PostAccumulateGradHookFiresOnceWithTheFinalGradient) {
  Tensor w = D({1, 2}).requires_grad_(true);
  int calls = 0;
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++calls;
    seen = V(p.grad());
  });
  // w is used by three consumers; the hook sees the sum: 3 + 2w + 1
  Tensor out = add(add(sum(mul(w, 3.0)), sum(mul(w, w))), sum(w));
  out.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (std::vector<double>{6, 8}));
  sum(w).backward();  // a second pass: once more, with the accumulated gradient
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(seen, (std::vector<double>{7, 9}));
}

TEST(Autograd, HooksFireInReverseOrderOfUse) {
  manual_seed(0);
  auto mlp = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(8, 8), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(8, 3)});
  std::vector<std::string> order;
  std::map<std::string, int> calls;
  std::map<std::string, std::vector<double>> at_hook;
  for (auto& [name, p] : mlp->named_parameters()) {
    Tensor param = p;
    param.register_post_accumulate_grad_hook([&, name](Tensor& t) {
      order.push_back(name);
      ++calls[name];
      at_hook[name] = V(t.grad());
    });
  }
  Tensor x = randn({5, 4});
  cross_entropy(mlp->forward(x), randint(0, 3, {5})).backward();
  ASSERT_EQ(order.size(), 6u);
  for (auto& [name, n] : calls) EXPECT_EQ(n, 1) << name;
  auto layer_of = [](const std::string& n) { return n[0] - '0'; };
  for (std::size_t i = 1; i < order.size(); ++i)
    EXPECT_GE(layer_of(order[i - 1]), layer_of(order[i])) << order[i - 1] << " before " << order[i];
  EXPECT_EQ(layer_of(order.front()), 4);
  EXPECT_EQ(layer_of(order.back()), 0);
  for (auto& [name, p] : mlp->named_parameters()) EXPECT_EQ(at_hook[name], V(p.grad())) << name;
}

TEST(Autograd, RemovedHookDoesNotFire) {
  Tensor w = D({1}).requires_grad_(true);
  int calls = 0;
  int id = w.register_post_accumulate_grad_hook([&](Tensor&) { ++calls; });
  w.remove_post_accumulate_grad_hook(id);
  sum(w).backward();
  EXPECT_EQ(calls, 0);
  EXPECT_THROW(mul(w, 2.0).register_post_accumulate_grad_hook([](Tensor&) {}), AutogradError);
}

TEST(Autograd, BackwardOnNonScalarThrowsNamingTheShape) {
  Tensor x = ones({2, 3}).requires_grad_(true);
  Tensor y = mul(x, 2.0);
  try {
    y.backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  y.backward(full({2, 3}, 0.5));  // an explicit gradient is fine
  EXPECT_EQ(V(x.grad()), std::vector<double>(6, 1.0));
}

TEST(Autograd, BackwardTwiceNeedsRetainGraph) {
  Tensor x = D({1, 2}).requires_grad_(true);
  Tensor loss = sum(exp(x));
  loss.backward();
  EXPECT_THROW(loss.backward(), AutogradError);

  Tensor x2 = D({0, 1}).requires_grad_(true);
  Tensor loss2 = sum(mul(x2, x2));
  loss2.backward({}, /*retain_graph=*/true);
  loss2.backward();  // works, and accumulates: 2 * 2x
  EXPECT_EQ(V(x2.grad()), (std::vector<double>{0, 4}));
  EXPECT_THROW(loss2.backward(), AutogradError);  // the second call did not retain
}

TEST(Autograd, InPlaceOnLeafRequiringGradThrows) {
  Tensor x = D({1, 2}).requires_grad_(true);
  EXPECT_THROW(x.add_(D({1, 1})), AutogradError);
  EXPECT_THROW(x.mul_(2.0), AutogradError);
  EXPECT_THROW(x.fill_(0.0), AutogradError);
  EXPECT_THROW(x.copy_(D({3, 4})), AutogradError);
  EXPECT_EQ(V(x), (std::vector<double>{1, 2}));  // untouched
  {
    no_grad guard;  // the optimizer's way
    x.add_(D({1, 1}), -0.5);
  }
  EXPECT_EQ(V(x), (std::vector<double>{0.5, 1.5}));
  EXPECT_THROW(mul(x, 2.0).requires_grad_(false), AutogradError);  // non-leaf
  EXPECT_THROW(arange(3).requires_grad_(true), AutogradError);     // int64
}

TEST(Autograd, DetachSharesDataWithoutHistory) {
  Tensor x = D({1, 2}).requires_grad_(true);
  Tensor y = mul(x, 3.0);
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_EQ(V(d), (std::vector<double>{3, 6}));
  d.data_ptr<double>()[0] = -1;  // same storage as y
  EXPECT_EQ(V(y)[0], -1.0);
  // a gradient does not flow through the detached branch
  sum(add(mul(x, 2.0), mul(x.detach(), 5.0))).backward();
  EXPECT_EQ(V(x.grad()), (std::vector<double>{2, 2}));
}

TEST(Autograd, OnlyInputsRequiringGradGetGradients) {
  Tensor a = D({1, 2}).requires_grad_(true), b = D({3, 4});
  sum(mul(a, b)).backward();
  EXPECT_EQ(V(a.grad()), (std::vector<double>{3, 4}));
  EXPECT_FALSE(b.grad().defined());
}

}  // namespace
}  // namespace lockstep::testing
