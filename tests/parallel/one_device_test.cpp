// DataParallel over one CPU device runs the wrapped module itself on the calling thread, as
// torch.nn.DataParallel does with one device: the forward sees the module object (not a replica)
// on the caller's thread; losses, gradients and parameters equal the plain module's step bit for
// bit, a .grad held from before is accumulated into as a plain backward does, and a batch whose
// targets are all ignored runs its forward but makes no gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "support/helpers.h"

namespace lockstep::testing {
namespace {

// Linear(4, 3) that records which object ran its forward and on which thread.
struct WhereProbe : nn::Cloneable<WhereProbe> {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<std::vector<std::pair<const void*, std::thread::id>>> log =
      std::make_shared<std::vector<std::pair<const void*, std::thread::id>>>();
  WhereProbe() { reset(); }
  void reset() override { fc = register_module("fc", std::make_shared<nn::Linear>(4, 3)); }
  Tensor forward(const Tensor& x) override {
    log->emplace_back(this, std::this_thread::get_id());
    return fc->forward(x);
  }
  std::string name() const override { return "WhereProbe"; }
};

std::shared_ptr<nn::Sequential> make_mlp() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, 7), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(7, 4)});
}

std::vector<float> flat(const std::vector<Tensor>& ts, bool grads) {
  std::vector<float> out;
  for (const auto& t : ts) {
    auto v = (grads ? t.grad() : t).to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(OneDevice, RunsTheModuleItselfOnTheCallingThread) {
  auto probe = std::make_shared<WhereProbe>();
  parallel::DataParallel dp(probe, cpus(1));
  manual_seed(1);
  dp.forward_backward(randn({6, 4}), randint(0, 3, {6}), nn::CrossEntropyLoss());
  ASSERT_EQ(probe->log->size(), 1u);
  EXPECT_EQ(probe->log->front().first, probe.get());
  EXPECT_EQ(probe->log->front().second, std::this_thread::get_id());
  EXPECT_TRUE(probe->fc->weight.grad().defined());
}

// The one device need not be cpu:0 (`lockstep train --devices cpu:1`): the batch and its target,
// both on cpu:0, go to cpu:1 together (the target stayed on cpu:0 and cross_entropy refused
// "logits on cpu:1, target on cpu:0"); the step equals the one on cpu:0 bit for bit.
TEST(OneDevice, AnotherCpuDeviceThanTheFirstTakesTheBatchAndTarget) {
  auto on0 = make_mlp();
  auto on1 = make_mlp();
  parallel::DataParallel dp0(on0, {cpu(0)});
  parallel::DataParallel dp1(on1, {cpu(1)});
  manual_seed(5);
  Tensor x = randn({6, 5}), y = randint(0, 4, {6});
  Tensor l0 = dp0.forward_backward(x, y, nn::CrossEntropyLoss());
  Tensor l1 = dp1.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_EQ(l1.item(), l0.item());
  EXPECT_EQ(flat(dp1.parameters(), true), flat(dp0.parameters(), true));
}

// Four SGD steps with momentum, the second and fourth without zero_grad (the .grad held from
// the step before is accumulated into): through DataParallel on cpu:0 and on the plain module.
TEST(OneDevice, EqualsThePlainModuleBitForBit) {
  auto plain = make_mlp();
  auto wrapped = make_mlp();
  parallel::DataParallel dp(wrapped, cpus(1));
  optim::SGDOptions o{.lr = 0.05, .momentum = 0.9};
  optim::SGD sgd_plain(plain->parameters(), o), sgd_dp(dp.parameters(), o);
  nn::CrossEntropyLoss ce;
  manual_seed(8);
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    Tensor x = randn({9, 5}), y = randint(0, 4, {9});
    if (s % 2 == 0) {
      sgd_plain.zero_grad();
      sgd_dp.zero_grad();
    }
    Tensor lp = ce(plain->forward(x), y);
    lp.backward();
    Tensor ld = dp.forward_backward(x, y, ce);
    EXPECT_EQ(ld.item(), lp.item());
    EXPECT_EQ(flat(dp.parameters(), true), flat(plain->parameters(), true));
    sgd_plain.step();
    sgd_dp.step();
    EXPECT_EQ(flat(dp.parameters(), false), flat(plain->parameters(), false));
  }
}

TEST(OneDevice, AllTargetsIgnoredRunsTheForwardAndMakesNoGradient) {
  auto probe = std::make_shared<WhereProbe>();
  parallel::DataParallel dp(probe, cpus(1));
  nn::CrossEntropyLoss ce;
  ce.ignore_index = -100;
  Tensor y = full({4}, -100.0, kInt64);
  Tensor loss = dp.forward_backward(randn({4, 4}), y, ce);
  EXPECT_TRUE(std::isnan(loss.item()));
  EXPECT_EQ(probe->log->size(), 1u);
  EXPECT_FALSE(probe->fc->weight.grad().defined());
}

}  // namespace
}  // namespace lockstep::testing
