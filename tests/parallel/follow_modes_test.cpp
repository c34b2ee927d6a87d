// DataParallel's replicas follow the training modes of the wrapped module and of each of its
// submodules at every call, as torch.nn.DataParallel's do (it replicates the module on every
// forward, and replicate.py copies `training`): module->eval() — not only dp.eval() — turns
// dropout off in the replicas, and a submodule's own mode reaches its counterparts.
#include <gtest/gtest.h>

#include "support/helpers.h"

namespace lockstep::testing {
namespace {

std::shared_ptr<nn::Sequential> make_net() {
  manual_seed(11);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, 16), std::make_shared<nn::Dropout>(0.5),
      std::make_shared<nn::Linear>(16, 3)});
}

// The module's own forward in its current modes, row by row (the replicas see rows 0-3 and 4-7).
void expect_matches_module(parallel::DataParallel& dp, nn::Sequential& net, const Tensor& x) {
  NoGradGuard no_grad;
  Tensor got = dp.forward(x);
  Tensor want = net.forward(x);
  ASSERT_EQ(got.shape(), want.shape());
  auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5) << "element " << i;
}

TEST(FollowModes, ModuleEvalReachesTheReplicas) {
  auto net = make_net();
  parallel::DataParallel dp(net, cpus(2));
  manual_seed(2);
  Tensor x = randn({8, 5});
  net->eval();  // on the module, not on the wrapper
  expect_matches_module(dp, *net, x);
}

TEST(FollowModes, ASubmodulesOwnModeReachesItsCounterparts) {
  auto net = make_net();
  parallel::DataParallel dp(net, cpus(2));
  manual_seed(2);
  Tensor x = randn({8, 5});
  net->train();
  net->children()[1]->eval();  // only the dropout
  expect_matches_module(dp, *net, x);
  // and back to training: the replicas' dropout zeroes activations again, so the output is no
  // longer the module's dropout-free one
  net->children()[1]->train();
  NoGradGuard no_grad;
  Tensor drop = dp.forward(x);
  net->eval();
  Tensor plain = net->forward(x);
  EXPECT_NE(drop.to_vector<float>(), plain.to_vector<float>());
}

TEST(FollowModes, ForwardBackwardFollowsToo) {
  // The reducer path: with dropout in eval mode through module->eval(), two devices give the
  // loss of one plain forward over the whole batch.
  auto net = make_net();
  parallel::DataParallel dp(net, cpus(2));
  manual_seed(4);
  Tensor x = randn({8, 5}), y = randint(0, 3, {8});
  net->eval();
  nn::CrossEntropyLoss ce;
  Tensor loss = dp.forward_backward(x, y, ce);
  Tensor want;
  {
    NoGradGuard no_grad;
    want = ce(net->forward(x), y);
  }
  EXPECT_NEAR(loss.item(), want.item(), 1e-5);
}

}  // namespace
}  // namespace lockstep::testing
