// Sliced steps (Optimizer::begin_sliced_step / update_slice / end_sliced_step): a step made in
// slices, in any order and from several threads, is bit-identical to step(); parameters not marked
// updated keep no state; every misuse is a typed error.
#include <gtest/gtest.h>

#include <thread>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::vector<std::pair<std::string, MakeOpt>> optimizers() {
  return {
      {"sgd momentum dampening wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(
             std::move(p),
             optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.1});
       }},
      {"sgd nesterov",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(
             std::move(p), optim::SGDOptions{.lr = 0.05, .momentum = 0.7, .nesterov = true});
       }},
      {"adam wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(std::move(p),
                                              optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
      {"adamw",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 0.02});
       }},
  };
}

// Three parameters (the last never has a gradient) and three steps of gradients.
struct Problem {
  std::vector<Tensor> params;
  std::vector<std::vector<Tensor>> grads;  // [step][param]
};
Problem problem(DType dt) {
  manual_seed(5);
  Problem s;
  for (const Shape& shape : {Shape({7, 9}), Shape({13}), Shape({4})})
    s.params.push_back(randn(shape).to(dt).requires_grad_(true));
  for (int t = 0; t < 3; ++t)
    s.grads.push_back({randn({7, 9}).to(dt), randn({13}).to(dt), Tensor()});
  return s;
}
std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

TEST(SlicedStep, SlicesInAnyOrderAndOnSeveralThreadsEqualStep) {
  for (DType dt : {kFloat32, kFloat64})
    for (const auto& [name, make] : optimizers()) {
      Problem s = problem(dt);
      auto ref_params = clones(s.params), params = clones(s.params);
      auto ref = make(ref_params), opt = make(params);
      for (std::size_t t = 0; t < s.grads.size(); ++t) {
        for (std::size_t i = 0; i < 3; ++i) ref_params[i].set_grad(s.grads[t][i]);
        ref->step();
        // All three are candidates; parameter 2 has no gradient and is not marked updated.
        opt->begin_sliced_step({1, 1, 1});
        // Parameter 0 in uneven slices on two threads, parameter 1 in slices in reverse order.
        std::thread a([&] { opt->update_slice(0, s.grads[t][0], 0, 17); });
        std::thread b([&] { opt->update_slice(0, s.grads[t][0], 17, 63); });
        for (std::int64_t hi = 13; hi > 0; hi -= 5)
          opt->update_slice(1, s.grads[t][1], std::max<std::int64_t>(0, hi - 5), hi);
        a.join();
        b.join();
        opt->end_sliced_step({1, 1, 0});
      }
      const std::string what = name + " " + to_string(dt);
      for (std::size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(BitEqual(params[i], ref_params[i])) << what << ": parameter " << i;
      StateDict want = ref->state_dict(), got = opt->state_dict();
      EXPECT_EQ(got.size(), want.size()) << what;
      for (const auto& [key, value] : want) {
        ASSERT_NE(got.find(key), nullptr) << what << ": " << key;
        EXPECT_TRUE(BitEqual(*got.find(key), value)) << what << ": " << key;
      }
      for (const auto& [key, value] : got)
        EXPECT_NE(key.rfind("state.2.", 0), 0u) << what << ": state for the gradient-less " << key;
    }
}

TEST(SlicedStep, AStepNotEndedOrNotMarkedUpdatedCreatesNoState) {
  auto p = zeros({4}).requires_grad_(true);
  optim::Adam opt({p}, {});
  opt.begin_sliced_step({1});
  EXPECT_FALSE(opt.state(0, "exp_avg").defined());  // held aside until end_sliced_step
  opt.end_sliced_step({0});
  EXPECT_FALSE(opt.state(0, "step").defined());
  EXPECT_FALSE(opt.state(0, "exp_avg").defined());
  // Abandoned (no end): the next begin starts afresh.
  opt.begin_sliced_step({1});
  opt.begin_sliced_step({1});
  opt.update_slice(0, ones({4}), 0, 4);
  opt.end_sliced_step({1});
  EXPECT_EQ(opt.state(0, "step").item(), 1.0);
}

struct NotElementwise : optim::Optimizer {
  explicit NotElementwise(std::vector<Tensor> p) : Optimizer(std::move(p)) {}
  void step() override {}

 protected:
  std::vector<std::string> state_names() const override { return {}; }
};

TEST(SlicedStep, MisuseIsATypedError) {
  auto p = zeros({2, 3}).requires_grad_(true), q = zeros({3}).requires_grad_(true);
  NotElementwise ne({p});
  EXPECT_FALSE(ne.supports_sliced_step());
  expect_error<ValueError>([&] { ne.begin_sliced_step({1}); }, {"not elementwise"});

  optim::SGD opt({p, q}, {.lr = 0.1});
  EXPECT_TRUE(opt.supports_sliced_step());
  expect_error<ValueError>([&] { opt.end_sliced_step({1, 1}); }, {"no sliced step in progress"});
  expect_error<ValueError>(
      [&] {
        opt.update_slice(0, zeros({2, 3}), 0, 6);
      },
      {"parameter 0", "not a candidate"});
  expect_error<ValueError>([&] { opt.begin_sliced_step({1}); },
                           {"1 candidate flags", "2 parameters"});
  opt.begin_sliced_step({1, 0});
  expect_error<ValueError>([&] { opt.update_slice(1, zeros({3}), 0, 3); },
                           {"parameter 1", "not a candidate"});
  expect_error<ValueError>([&] { opt.update_slice(2, zeros({3}), 0, 3); }, {"parameter 2"});
  expect_error<DTypeError>(
      [&] {
        opt.update_slice(0, zeros({2, 3}, kFloat64), 0, 6);
      },
      {"parameter 0", "float32", "float64"});
  expect_error<ShapeError>([&] { opt.update_slice(0, zeros({6}), 0, 6); }, {"[2, 3]", "[6]"});
  expect_error<ValueError>(
      [&] {
        opt.update_slice(0, zeros({2, 3}), 4, 7);
      },
      {"range [4, 7)", "6 elements"});
  expect_error<ValueError>([&] { opt.update_slice(0, zeros({2, 3}), 3, 2); }, {"range [3, 2)"});
  expect_error<ValueError>([&] { opt.end_sliced_step({1}); }, {"1 flags", "2 parameters"});
  expect_error<ValueError>(
      [&] {
        opt.end_sliced_step({1, 1});
      },
      {"parameter 1", "not a candidate"});
  opt.update_slice(0, ones({2, 3}), 0, 6);
  opt.end_sliced_step({1, 0});
  EXPECT_TRUE(AllClose(p, full({2, 3}, -0.1)));
}

}  // namespace
}  // namespace lockstep::testing
