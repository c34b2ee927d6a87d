// Every PyTorch golden trajectory in tests/data is reproduced on one device: per-step training
// losses, per-epoch validation losses and final parameters, all within allclose.
#include <gtest/gtest.h>

#include "support/golden.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, ReproducesPyTorchTrajectory) {
  Golden g = load_golden(GetParam());
  auto model = build_mlp(g);
  auto optimizer = build_optimizer(g, model->parameters());
  Tensor x_train = g.x.narrow(0, 0, g.n_train), y_train = g.y.narrow(0, 0, g.n_train);
  Tensor x_val = g.x.narrow(0, g.n_train, g.n_val), y_val = g.y.narrow(0, g.n_train, g.n_val);
  data::DataLoader loader(std::make_shared<data::TensorDataset>(x_train, y_train),
                          {.batch_size = g.batch_size});
  std::vector<double> step_losses, val_losses;
  for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch) {
    model->train();
    for (const auto& [bx, by] : loader) {
      optimizer->zero_grad();
      Tensor loss = cross_entropy(model->forward(bx), by);
      step_losses.push_back(loss.item());
      loss.backward();
      optimizer->step();
    }
    model->eval();
    no_grad guard;
    val_losses.push_back(cross_entropy(model->forward(x_val), y_val).item());
  }
  EXPECT_TRUE(AllClose(step_losses, g.step_losses)) << "train_step_losses";
  EXPECT_TRUE(AllClose(val_losses, g.val_losses)) << "val_loss_per_epoch";
  StateDict final_sd = model->state_dict();
  ASSERT_EQ(final_sd.size(), g.final_params.size());
  for (const auto& [name, expected] : g.final_params)
    EXPECT_TRUE(AllClose(final_sd.at(name), expected)) << name;
}

INSTANTIATE_TEST_SUITE_P(AllGoldenFiles, GoldenTest, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace lockstep::testing
