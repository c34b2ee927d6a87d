// DataParallel::no_sync(): K−1 forward_backward calls inside the guard and one outside reduce
// once and give the gradients of K plain calls.
#include <gtest/gtest.h>

#include <atomic>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

parallel::DataParallelOptions opts(bool deterministic = false) {
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  o.deterministic = deterministic;
  o.seed = 5;
  return o;
}

std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Linear>(16, 3)});
}

struct Batches {
  std::vector<Tensor> x, y;
};

Batches batches(std::vector<std::int64_t> sizes) {
  Batches b;
  for (auto n : sizes) {
    b.x.push_back(randn({n, 6}));
    b.y.push_back(randint(0, 3, {n}));
  }
  return b;
}

std::vector<Tensor> grads(nn::Module& m) {
  std::vector<Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return out;
}

// K plain calls (each reduces and adds into .grad): the reference.
std::vector<Tensor> plain(const std::shared_ptr<nn::Module>& base, const Batches& b, int devices,
                          bool deterministic, std::vector<double>* losses = nullptr) {
  nn::DataParallel dp(base->clone(), cpus(devices), std::nullopt, opts(deterministic));
  for (std::size_t i = 0; i < b.x.size(); ++i) {
    double l = dp.forward_backward(b.x[i], b.y[i], nn::CrossEntropyLoss()).item();
    if (losses) losses->push_back(l);
  }
  return grads(*dp.module());
}

TEST(DataParallelNoSync, AccumulatesLocallyThenReducesOnceLikeKCalls) {
  manual_seed(21);
  auto base = mlp();
  Batches b = batches({13, 7, 2, 9});  // 2 < 3 devices: one replica idle in that call
  std::vector<double> ref_losses;
  auto ref = plain(base, b, 3, false, &ref_losses);

  nn::DataParallel dp(base->clone(), cpus(3), std::nullopt, opts());
  EXPECT_TRUE(dp.require_backward_grad_sync());
  std::vector<double> losses;
  {
    auto guard = dp.no_sync();
    EXPECT_FALSE(dp.require_backward_grad_sync());
    for (std::size_t i = 0; i + 1 < b.x.size(); ++i) {
      losses.push_back(dp.forward_backward(b.x[i], b.y[i], nn::CrossEntropyLoss()).item());
      // nothing reduced, .grad untouched; only parameter copies moved
      for (auto& p : dp.parameters()) EXPECT_FALSE(p.grad().defined());
    }
  }
  EXPECT_TRUE(dp.require_backward_grad_sync());
  losses.push_back(dp.forward_backward(b.x.back(), b.y.back(), nn::CrossEntropyLoss()).item());
  EXPECT_EQ(losses, ref_losses);  // each call's own mean loss, computed the same way
  auto got = grads(*dp.module());
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t j = 0; j < ref.size(); ++j) EXPECT_TRUE(AllClose(got[j], ref[j])) << j;
  // not just the last batch: that alone is far from the sum
  auto last_only = plain(base, Batches{{b.x.back()}, {b.y.back()}}, 3, false);
  EXPECT_FALSE(AllClose(last_only[0], ref[0]));

  // the pending buffers were consumed: a second cycle again equals K plain calls, added on top
  dp.set_step_count(0);  // the same dropout masks as the first cycle
  {
    auto guard = dp.no_sync();
    for (std::size_t i = 0; i + 1 < b.x.size(); ++i)
      dp.forward_backward(b.x[i], b.y[i], nn::CrossEntropyLoss());
  }
  dp.forward_backward(b.x.back(), b.y.back(), nn::CrossEntropyLoss());
  auto twice = grads(*dp.module());
  for (std::size_t j = 0; j < ref.size(); ++j)
    EXPECT_TRUE(AllClose(twice[j], mul(ref[j], 2.0))) << j;
}

TEST(DataParallelNoSync, GuardsNestAndRestore) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  {
    auto outer = dp.no_sync();
    {
      auto inner = dp.no_sync();
      EXPECT_FALSE(dp.require_backward_grad_sync());
    }
    EXPECT_FALSE(dp.require_backward_grad_sync());
  }
  EXPECT_TRUE(dp.require_backward_grad_sync());
}

TEST(DataParallelNoSync, IsANoOpInDeterministicMode) {
  manual_seed(22);
  auto base = mlp();
  Batches b = batches({13, 7, 9});
  auto ref = plain(base, b, 2, true);
  for (int devices : {1, 2, 3}) {
    nn::DataParallel dp(base->clone(), cpus(devices), std::nullopt, opts(true));
    {
      auto guard = dp.no_sync();
      dp.forward_backward(b.x[0], b.y[0], nn::CrossEntropyLoss());
      // reduced at once: .grad is there already
      EXPECT_TRUE(dp.parameters()[0].grad().defined());
      dp.forward_backward(b.x[1], b.y[1], nn::CrossEntropyLoss());
    }
    dp.forward_backward(b.x[2], b.y[2], nn::CrossEntropyLoss());
    auto got = grads(*dp.module());
    for (std::size_t j = 0; j < ref.size(); ++j)
      EXPECT_TRUE(BitEqual(got[j], ref[j])) << devices << " devices, parameter " << j;
  }
}

std::atomic<bool> g_use_b{false};
std::atomic<bool> g_fail_on_cpu1{false};

// Head b is used only while g_use_b is set; throws on cpu:1 while g_fail_on_cpu1 is set.
struct TwoHeads : nn::Cloneable<TwoHeads> {
  std::shared_ptr<nn::Linear> a, b;
  TwoHeads() { reset(); }
  void reset() override {
    a = register_module("a", std::make_shared<nn::Linear>(6, 3));
    b = register_module("b", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    if (g_fail_on_cpu1 && x.device().index == 1) throw ValueError("injected failure");
    return g_use_b ? add(a->forward(x), b->forward(x)) : a->forward(x);
  }
};

TEST(DataParallelNoSync, ParameterUsedOnlyInsideTheGuardIsReduced) {
  manual_seed(23);
  auto base = std::make_shared<TwoHeads>();
  Batches b = batches({8, 6});
  // reference: call 0 with head b, call 1 without
  nn::DataParallel ref_dp(base->clone(), cpus(2), std::nullopt, opts());
  g_use_b = true;
  ref_dp.forward_backward(b.x[0], b.y[0], nn::CrossEntropyLoss());
  g_use_b = false;
  ref_dp.forward_backward(b.x[1], b.y[1], nn::CrossEntropyLoss());
  auto ref = grads(*ref_dp.module());

  nn::DataParallel dp(base->clone(), cpus(2), std::nullopt, opts());
  {
    auto guard = dp.no_sync();
    g_use_b = true;
    dp.forward_backward(b.x[0], b.y[0], nn::CrossEntropyLoss());
    g_use_b = false;
  }
  dp.forward_backward(b.x[1], b.y[1], nn::CrossEntropyLoss());
  auto got = grads(*dp.module());
  ASSERT_EQ(got.size(), 4u);
  for (std::size_t j = 0; j < ref.size(); ++j) {
    ASSERT_TRUE(got[j].defined()) << j;  // b.weight / b.bias: from the guarded call only
    EXPECT_TRUE(AllClose(got[j], ref[j])) << j;
  }
}

TEST(DataParallelNoSync, AFailedCallInsideTheGuardAddsNothing) {
  manual_seed(24);
  auto base = std::make_shared<TwoHeads>();
  Batches b = batches({8, 5, 6});
  auto ref = plain(base, Batches{{b.x[0], b.x[2]}, {b.y[0], b.y[2]}}, 2, false);

  nn::DataParallel dp(base->clone(), cpus(2), std::nullopt, opts());
  {
    auto guard = dp.no_sync();
    dp.forward_backward(b.x[0], b.y[0], nn::CrossEntropyLoss());
    g_fail_on_cpu1 = true;
    EXPECT_THROW(dp.forward_backward(b.x[1], b.y[1], nn::CrossEntropyLoss()), ValueError);
    g_fail_on_cpu1 = false;
  }
  dp.forward_backward(b.x[2], b.y[2], nn::CrossEntropyLoss());
  auto got = grads(*dp.module());
  for (std::size_t j = 0; j < ref.size(); ++j) {
    ASSERT_TRUE(got[j].defined() == ref[j].defined()) << j;
    if (ref[j].defined()) EXPECT_TRUE(AllClose(got[j], ref[j])) << j;
  }
}

}  // namespace
}  // namespace lockstep::testing
