// One owner of the optimizer step: with a registered (fused) optimizer, forward_backward() makes
// the step wherever it runs — on the workers, at its end, across ranks — and pre-step hooks
// (clip_grad_norm_) run right before it, bit-identical to clipping and stepping by hand; a hook
// that throws leaves the parameters untouched. The backend says which elements each rank summed
// (ProcessGroup::epilogue_range).
#include <gtest/gtest.h>

#include "lockstep/parallel/distributed.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

std::shared_ptr<nn::Sequential> make_mlp() {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(8, 3)});
}

std::vector<float> values(const nn::Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters()) {
    auto v = p.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

Tensor loss_of(const Tensor& out, const Tensor& y) { return mse_loss(out, y); }

// Three steps of SGD with momentum and clipping to max_norm 0.05 (the gradients here are larger,
// so clipping changes every step): by hand, or through a fused optimizer with a pre-step hook.
std::vector<float> train(int devices, bool owner) {
  auto model = make_mlp();
  parallel::DataParallel dp(model, cpus(devices));
  auto sgd = std::make_shared<optim::SGD>(dp.parameters(),
                                          optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  if (owner) {
    dp.register_fused_optim(sgd);
    dp.register_step_pre_hook([&] { nn::utils::clip_grad_norm_(dp.parameters(), 0.05); });
  }
  manual_seed(9);
  Tensor x = randn({10, 4}), y = randn({10, 3});
  for (int s = 0; s < 3; ++s) {
    sgd->zero_grad();
    dp.forward_backward(x, y, loss_of);
    if (!owner) {
      nn::utils::clip_grad_norm_(dp.parameters(), 0.05);
      sgd->step();
    }
  }
  return values(*model);
}

TEST(StepOwner, PreStepHookClipsBeforeTheFusedStepBitForBit) {
  for (int devices : {1, 2, 3}) {
    SCOPED_TRACE("devices " + std::to_string(devices));
    const auto by_hand = train(devices, false);
    EXPECT_EQ(train(devices, true), by_hand);
    EXPECT_NE(by_hand, values(*make_mlp()));  // the steps changed something
  }
}

TEST(StepOwner, AHookThatThrowsMakesNoStep) {
  auto model = make_mlp();
  parallel::DataParallel dp(model, cpus(2));
  auto sgd = std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  dp.register_fused_optim(sgd);
  dp.register_step_pre_hook([] { throw ValueError("hook refused"); });
  const auto before = values(*model);
  EXPECT_THROW(dp.forward_backward(randn({6, 4}), randn({6, 3}), loss_of), ValueError);
  EXPECT_EQ(values(*model), before);
}

TEST(StepOwner, DistributedFusedStepEqualsStepAfterForwardBackward) {
  std::vector<std::vector<float>> fused(2), manual(2);
  for (bool owner : {false, true}) {
    // Models and data made here: the rank threads share the default generator.
    std::vector<std::shared_ptr<nn::Sequential>> models;
    std::vector<Tensor> xs, ys;
    for (int rank = 0; rank < 2; ++rank) {
      models.push_back(make_mlp());
      manual_seed(20 + rank);
      xs.push_back(randn({5, 4}));
      ys.push_back(randn({5, 3}));
    }
    run_ranks(2, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
      const auto r = static_cast<std::size_t>(rank);
      parallel::DistributedDataParallel ddp(models[r], group);
      auto sgd = std::make_shared<optim::SGD>(ddp.parameters(), optim::SGDOptions{.lr = 0.1});
      if (owner) ddp.register_fused_optim(sgd);
      for (int s = 0; s < 2; ++s) {
        sgd->zero_grad();
        ddp.forward_backward(xs[r], ys[r], loss_of);
        if (!owner) sgd->step();
      }
      (owner ? fused : manual)[r] = values(*models[r]);
    });
  }
  EXPECT_EQ(fused, manual);
  EXPECT_EQ(fused[0], fused[1]);
}

TEST(StepOwner, TheThreadsBackendSaysWhichElementsEachRankSums) {
  auto group = dist::new_thread_group(3);
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (auto& g : group) ranges.push_back(g->epilogue_range(10, 0));
  EXPECT_EQ(ranges, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 3}, {3, 6}, {6, 10}}));
  EXPECT_THROW(group[0]->epilogue_range(10, 3), ValueError);
}

}  // namespace
}  // namespace lockstep::testing
