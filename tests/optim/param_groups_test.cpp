// Parameter groups (optim::ParamGroup) in Adam/AdamW and nanoGPT's set-up
// (optim/configure_optimizers.h), and nanoGPT's warmup + cosine schedule (WarmupCosineLR).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

Tensor param(std::uint64_t seed, const Shape& shape) {
  Generator gen(seed);
  Tensor p = randn(shape, {}, &gen);
  p.requires_grad_(true);
  return p;
}

void set_grads(const std::vector<Tensor>& ps, std::uint64_t seed) {
  Generator gen(seed);
  for (Tensor p : ps) p.set_grad(randn(p.shape(), {}, &gen));
}

TEST(ParamGroups, EachGroupStepsWithItsWeightDecayAsSeparateOptimizers) {
  // Two groups in one AdamW give the bits of one AdamW per group (the update is per element).
  std::vector<Tensor> a = {param(1, {4, 3}), param(2, {5})}, b = {param(3, {4, 3}), param(4, {5})};
  for (std::size_t i = 0; i < a.size(); ++i) {
    NoGradGuard g;
    b[i].copy_(a[i]);
  }
  optim::AdamWOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  optim::AdamW grouped({{{a[0]}, 0.1}, {{a[1]}, 0.0}}, o);
  optim::AdamW decay({b[0]}, o);
  o.weight_decay = 0.0;
  optim::AdamW no_decay({b[1]}, o);
  EXPECT_EQ(grouped.weight_decay(0), 0.1);
  EXPECT_EQ(grouped.weight_decay(1), 0.0);
  for (int step = 0; step < 3; ++step) {
    set_grads(a, 10 + step);
    set_grads(b, 10 + step);
    grouped.step();
    decay.step();
    no_decay.step();
  }
  EXPECT_TRUE(BitEqual(a[0], b[0]));
  EXPECT_TRUE(BitEqual(a[1], b[1]));
  // Unset: the optimizer's weight decay.
  optim::AdamW unset({{{param(5, {2})}, std::nullopt}}, {.weight_decay = 0.3});
  EXPECT_EQ(unset.weight_decay(0), 0.3);
}

TEST(ParamGroups, RefusesATensorListedTwiceAndBadDecay) {
  const Tensor p = param(1, {3});
  EXPECT_THROW(optim::AdamW({{{p}, 0.1}, {{p}, 0.0}}), ValueError);
  EXPECT_THROW(optim::AdamW(std::vector<Tensor>{p, p}), ValueError);
  EXPECT_THROW(optim::SGD({p, p}, {.lr = 0.1}), ValueError);
  try {
    optim::AdamW({{{p}, 0.1}, {{param(2, {3})}, -1.0}});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter group 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(optim::AdamW(std::vector<optim::ParamGroup>{{{}, 0.1}}), ValueError);
}

TEST(ParamGroups, ConfigureOptimizersDecaysTensorsOfTwoOrMoreDimensions) {
  nn::GPT model({.block_size = 8, .vocab_size = 11, .n_layer = 1, .n_head = 2, .n_embd = 8,
                 .dropout = 0.0, .bias = true});
  const auto opt = optim::configure_optimizers(model, 0.1, 6e-4, {0.9, 0.95});
  const auto& ps = opt->params();
  ASSERT_EQ(ps.size(), model.parameters().size());
  for (std::size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(opt->weight_decay(i), ps[i].dim() >= 2 ? 0.1 : 0.0) << i;
  EXPECT_EQ(opt->lr(), 6e-4);
  EXPECT_EQ(opt->options().beta2, 0.95);
  EXPECT_THROW(optim::weight_decay_groups(model, -0.1), ValueError);
  nn::ModuleDict empty;
  EXPECT_THROW(optim::configure_optimizers(empty, 0.1, 1e-3), ValueError);
}

// nanoGPT's get_lr, written out here as train.py has it, for the comparison.
double nanogpt_lr(std::int64_t it, double lr, std::int64_t warmup, std::int64_t decay,
                  double min_lr) {
  if (it < warmup) return lr * (it + 1) / (warmup + 1);
  if (it > decay) return min_lr;
  const double ratio = double(it - warmup) / double(decay - warmup);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (lr - min_lr);
}

TEST(WarmupCosineLR, StepsThroughNanoGptsSchedule) {
  const Tensor p = param(1, {2});
  optim::AdamW opt({p}, {.lr = 6e-4});
  optim::WarmupCosineLR schedule(opt, 10, 50, 6e-5);
  // Iteration 0's lr right after construction, then one step() per iteration.
  for (std::int64_t it = 0; it < 60; ++it) {
    EXPECT_EQ(opt.lr(), nanogpt_lr(it, 6e-4, 10, 50, 6e-5)) << it;
    EXPECT_EQ(schedule.lr_at(it), opt.lr()) << it;
    schedule.step();
  }
  // What nanoGPT's get_lr gives in Python (learning_rate 1e-2, warmup 2, decay 3, min
  // 1e-3): tests/data/gpt/gpt_nobias.json's steps.
  optim::AdamW opt2({p}, {.lr = 1e-2});
  optim::WarmupCosineLR s2(opt2, 2, 3, 1e-3);
  EXPECT_EQ(s2.lr_at(0), 0.0033333333333333335);
  EXPECT_EQ(s2.lr_at(1), 0.006666666666666667);
  EXPECT_EQ(s2.lr_at(2), 0.010000000000000002);
  EXPECT_EQ(s2.lr_at(3), 0.001);
  EXPECT_EQ(s2.lr_at(4), 0.001);
}

TEST(WarmupCosineLR, ResumesFromItsStateDict) {
  const Tensor p = param(1, {2});
  optim::AdamW a({p}, {.lr = 1e-3}), b({p}, {.lr = 1e-3});
  optim::WarmupCosineLR sa(a, 3, 20, 1e-4), sb(b, 3, 20, 1e-4);
  for (int i = 0; i < 7; ++i) sa.step();
  sb.load_state_dict(sa.state_dict());
  EXPECT_EQ(b.lr(), a.lr());
  sa.step();
  sb.step();
  EXPECT_EQ(b.lr(), a.lr());
}

TEST(WarmupCosineLR, RefusesBadArguments) {
  const Tensor p = param(1, {2});
  optim::AdamW opt({p});
  EXPECT_THROW(optim::WarmupCosineLR(opt, -1, 10, 0.0), ValueError);
  EXPECT_THROW(optim::WarmupCosineLR(opt, 10, 10, 0.0), ValueError);
  EXPECT_THROW(optim::WarmupCosineLR(opt, 0, 10, -1e-4), ValueError);
  EXPECT_THROW(optim::WarmupCosineLR(opt, 0, 10, std::nan("")), ValueError);
  // warmup 0: the cosine starts at iteration 0 with the full lr.
  optim::WarmupCosineLR s(opt, 0, 10, 0.0);
  EXPECT_EQ(opt.lr(), 0.001);
}

}  // namespace
}  // namespace lockstep::testing
