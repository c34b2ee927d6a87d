// DataParallel::step_count / set_step_count: the counter that keys dropout masks, and resuming
// from a saved step (issue 4: --resume is bit-identical to an uninterrupted run).
#include <gtest/gtest.h>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

std::shared_ptr<nn::Sequential> dropout_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(16, 3)});
}

StateDict copy_of(const StateDict& sd) {
  StateDict out;
  for (const auto& [k, v] : sd) out.insert(k, v.detach().clone());
  return out;
}

TEST(DataParallelStepCount, CountsTrainingCallsOnly) {
  auto model = dropout_mlp();
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  nn::DataParallel dp(model, cpus(2), std::nullopt, o);
  Tensor x = randn({5, 6});
  Tensor y = randint(0, 3, {5});
  EXPECT_EQ(dp.step_count(), 0u);
  dp.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_EQ(dp.step_count(), 1u);
  dp.forward(x);  // training mode: counts, also under no_grad
  {
    no_grad guard;
    dp.forward(x);
  }
  EXPECT_EQ(dp.step_count(), 3u);
  dp.eval();
  dp.forward(x);  // eval: does not count
  EXPECT_EQ(dp.step_count(), 3u);
  dp.train();
  // rejected input: not counted
  EXPECT_THROW(dp.forward_backward(x, randint(0, 3, {4}), nn::CrossEntropyLoss()), ShapeError);
  EXPECT_EQ(dp.step_count(), 3u);
  dp.set_step_count(41);
  EXPECT_EQ(dp.step_count(), 41u);
  dp.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_EQ(dp.step_count(), 42u);
}

// The dropout key of a training call is the counter's value: the same counter gives the same
// masks, another counter other masks.
TEST(DataParallelStepCount, TheCounterSelectsTheMasks) {
  manual_seed(3);
  auto model = dropout_mlp();
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  nn::DataParallel dp(model, cpus(2), std::nullopt, o);
  Tensor x = randn({7, 6});
  dp.set_step_count(5);
  Tensor a = dp.forward(x).detach();
  Tensor b = dp.forward(x).detach();  // key 6
  dp.set_step_count(5);
  Tensor c = dp.forward(x).detach();
  EXPECT_TRUE(BitEqual(a, c));
  EXPECT_FALSE(AllClose(a, b));
}

// Three steps straight, versus a fresh wrapper (same initial parameters) restored from the
// state after step 1 — parameters, optimizer state and set_step_count(1) — then stepped twice:
// bit-identical parameters, in default and deterministic mode. Without set_step_count the
// resumed run draws step 0's masks again and ends elsewhere (the test can fail).
TEST(DataParallelStepCount, ResumeAfterStepOneIsBitIdentical) {
  manual_seed(11);
  auto base = dropout_mlp();
  std::vector<Tensor> xs, ys;
  for (int s = 0; s < 3; ++s) {
    xs.push_back(randn({13, 6}));
    ys.push_back(randint(0, 3, {13}));
  }
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "default");
    parallel::DataParallelOptions o;
    o.threads_per_device = 1;
    o.deterministic = deterministic;
    o.seed = 7;
    const int devices = deterministic ? 3 : 2;
    auto step = [&](nn::DataParallel& dp, optim::SGD& opt, int s) {
      opt.zero_grad();
      dp.forward_backward(xs[s], ys[s], nn::CrossEntropyLoss());
      opt.step();
    };

    nn::DataParallel straight(base->clone(), cpus(devices), std::nullopt, o);
    optim::SGD opt(straight.parameters(), {.lr = 0.1, .momentum = 0.9});
    step(straight, opt, 0);
    const StateDict params1 = copy_of(straight.state_dict());
    const StateDict opt1 = opt.state_dict();
    const std::uint64_t count1 = straight.step_count();
    EXPECT_EQ(count1, 1u);
    step(straight, opt, 1);
    step(straight, opt, 2);
    EXPECT_EQ(straight.step_count(), 3u);

    for (bool restore_count : {true, false}) {
      nn::DataParallel resumed(base->clone(), cpus(devices), std::nullopt, o);
      resumed.load_state_dict(params1);
      optim::SGD opt2(resumed.parameters(), {.lr = 0.1, .momentum = 0.9});
      opt2.load_state_dict(opt1);
      if (restore_count) resumed.set_step_count(count1);
      step(resumed, opt2, 1);
      step(resumed, opt2, 2);
      bool all_equal = true;
      for (const auto& [k, v] : straight.state_dict()) {
        bool eq = BitEqual(resumed.state_dict().at(k), v);
        if (restore_count) EXPECT_TRUE(eq) << k;
        all_equal = all_equal && eq;
      }
      if (!restore_count) EXPECT_FALSE(all_equal) << "the masks of step 0 were drawn again";
    }
  }
}

}  // namespace
}  // namespace lockstep::testing
