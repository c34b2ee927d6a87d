// The CNN layers as modules: Conv2d's PyTorch names, shapes and init bounds; BatchNorm1d/2d's
// parameters, buffers (num_batches_tracked a 0-d int64), running-statistics updates (momentum
// and the cumulative average), eval, bad input that changes nothing; the pooling layers and
// Flatten; a BatchNorm under DataParallel keeps device 0's statistics, and deterministic mode
// refuses it in training.
#include <gtest/gtest.h>

#include <cmath>

#include "support/helpers.h"

namespace lockstep::testing {
namespace {

std::vector<std::string> keys(const nn::Module& m) { return m.state_dict().keys(); }
std::vector<double> V(const Tensor& t) { return t.to_vector<double>(); }

TEST(Conv2dLayer, NamesShapesAndInitFollowPyTorch) {
  manual_seed(0);
  nn::Conv2d conv(4, 6, {3, 5}, {1, 1}, {1, 2}, {1, 1}, 2);
  EXPECT_EQ(keys(conv), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 2, 3, 5}));
  EXPECT_EQ(conv.bias.shape(), (Shape{6}));
  // kaiming_uniform_(a=√5) and the bias: U(±1/√fan_in), fan_in = 2 · 3 · 5.
  const double bound = 1.0 / std::sqrt(30.0);
  double widest = 0;
  for (double w : V(conv.weight)) {
    EXPECT_LE(std::abs(w), bound);
    widest = std::max(widest, std::abs(w));
  }
  EXPECT_GT(widest, 0.8 * bound);  // drawn over the whole interval, not a narrower one
  for (double b : V(conv.bias)) EXPECT_LE(std::abs(b), bound);
  nn::Conv2d square(1, 16, 3, 1, 1);
  EXPECT_EQ(square.weight.shape(), (Shape{16, 1, 3, 3}));
  EXPECT_EQ(square.padding, (Size2{1, 1}));
  EXPECT_EQ(keys(nn::Conv2d(1, 2, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false)),
            (std::vector<std::string>{"weight"}));
}

TEST(Conv2dLayer, BadArgumentsAndInputsNameTheLayer) {
  expect_error<ValueError>([] { nn::Conv2d(3, 4, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 2); },
                           {"Conv2d(3, 4", "groups=2", "divide"});
  expect_error<ValueError>([] { nn::Conv2d(3, 4, {0, 3}); }, {"Conv2d(3, 4", "positive"});
  expect_error<ValueError>([] { nn::Conv2d(3, 4, {3, 3}, {0, 1}); }, {"stride"});
  nn::Conv2d conv(3, 4, 3);
  expect_error<ShapeError>([&] { conv.forward(zeros({3, 8, 8})); }, {"Conv2d(3, 4", "[3, 8, 8]"});
  expect_error<ShapeError>([&] { conv.forward(zeros({1, 2, 8, 8})); }, {"Conv2d(3, 4", "[1, 2, 8, 8]"});
  expect_error<ShapeError>([&] { conv.forward(zeros({1, 3, 2, 2})); }, {"Conv2d(3, 4", "[1, 3, 2, 2]"});
}

TEST(BatchNormLayer, ParametersBuffersAndStateDictKeys) {
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(keys(bn), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                                "num_batches_tracked"}));
  EXPECT_EQ(V(bn.weight), std::vector<double>(3, 1.0));
  EXPECT_EQ(V(bn.bias), std::vector<double>(3, 0.0));
  EXPECT_EQ(V(bn.running_mean), std::vector<double>(3, 0.0));
  EXPECT_EQ(V(bn.running_var), std::vector<double>(3, 1.0));
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn.parameters().size(), 2u);
  EXPECT_EQ(keys(nn::BatchNorm1d(2, 1e-5, 0.1, false, false)), std::vector<std::string>{});
}

TEST(BatchNormLayer, TrainingUpdatesTheRunningStatisticsAsPyTorch) {
  // One channel, values {1, 2, 3, 6}: mean 3, biased variance 3.5, unbiased 14/3.
  nn::BatchNorm1d bn(1);
  Tensor x = tensor(std::vector<float>{1, 2, 3, 6}).reshape({4, 1});
  Tensor y = bn.forward(x);
  EXPECT_NEAR(V(bn.running_mean)[0], 0.1 * 3.0, 1e-6);
  EXPECT_NEAR(V(bn.running_var)[0], 0.9 + 0.1 * 14.0 / 3.0, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1);
  EXPECT_NEAR(V(y)[0], (1 - 3) / std::sqrt(3.5 + 1e-5), 1e-5);
  bn.forward(x);
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item(), 3);
  // Eval: the running statistics normalize; nothing moves.
  bn.eval();
  const double rm = V(bn.running_mean)[0], rv = V(bn.running_var)[0];
  Tensor e = bn.forward(x);
  EXPECT_NEAR(V(e)[3], (6 - rm) / std::sqrt(rv + 1e-5), 1e-5);
  EXPECT_EQ(bn.num_batches_tracked.item(), 3);
  EXPECT_EQ(V(bn.running_mean)[0], rm);
}

TEST(BatchNormLayer, MomentumNoneIsTheCumulativeAverage) {
  nn::BatchNorm1d bn(1, 1e-5, std::nullopt);
  const std::vector<std::vector<float>> batches = {{1, 3}, {4, 8}, {0, 2}};  // means 2, 6, 1
  for (const auto& b : batches) bn.forward(tensor(b).reshape({2, 1}));
  EXPECT_NEAR(V(bn.running_mean)[0], 3.0, 1e-6);
  // Unbiased variances 2, 8, 2: the first factor is 1/1, so the initial 1 is replaced and the
  // result is their plain average (2 + 8 + 2) / 3.
  EXPECT_NEAR(V(bn.running_var)[0], 4.0, 1e-5);
  EXPECT_EQ(bn.num_batches_tracked.item(), 3);
}

TEST(BatchNormLayer, BadInputNamesTheLayerAndChangesNothing) {
  nn::BatchNorm1d bn(3);
  expect_error<ValueError>([&] { bn.forward(ones({1, 3})); },
                           {"BatchNorm1d(3)", "more than 1 value per channel"});
  EXPECT_EQ(bn.num_batches_tracked.item(), 0);
  EXPECT_EQ(V(bn.running_mean), std::vector<double>(3, 0.0));
  expect_error<ShapeError>([&] { bn.forward(ones({4, 2})); }, {"BatchNorm1d(3)", "[4, 2]"});
  nn::BatchNorm2d bn2(3);
  expect_error<ShapeError>([&] { bn2.forward(ones({4, 3, 5})); },
                           {"BatchNorm2d(3)", "expected 4D input (got 3D input"});
  expect_error<ValueError>([] { nn::BatchNorm2d(0); }, {"num_features"});
  expect_error<ValueError>([] { nn::BatchNorm2d(2, 1e-5, 1.5); }, {"momentum"});
}

TEST(BatchNormLayer, CloneCopiesTheBuffers) {
  nn::BatchNorm2d bn(2);
  bn.forward(randn({4, 2, 3, 3}));
  auto copy = std::dynamic_pointer_cast<nn::BatchNorm2d>(bn.clone());
  ASSERT_TRUE(copy);
  EXPECT_EQ(V(copy->running_mean), V(bn.running_mean));
  EXPECT_EQ(copy->num_batches_tracked.item(), 1);
  EXPECT_FALSE(copy->running_mean.is_same(bn.running_mean));
}

TEST(PoolingLayers, ShapesAndArguments) {
  Tensor x = randn({2, 3, 7, 6});
  EXPECT_EQ(nn::MaxPool2d(2).forward(x).shape(), (Shape{2, 3, 3, 3}));
  EXPECT_EQ(nn::AvgPool2d({3, 2}, Size2{2, 1}, {1, 0}).forward(x).shape(), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(nn::AdaptiveAvgPool2d(1).forward(x).shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(nn::Flatten().forward(x).shape(), (Shape{2, 126}));
  EXPECT_EQ(nn::Flatten(0, 1).forward(x).shape(), (Shape{6, 7, 6}));
  expect_error<ValueError>([] { nn::MaxPool2d({2, 2}, std::nullopt, {2, 0}); },
                           {"MaxPool2d", "half of the kernel"});
  expect_error<ValueError>([] { nn::AdaptiveAvgPool2d(0); }, {"AdaptiveAvgPool2d"});
  expect_error<IndexError>([&] { nn::Flatten(3, 1).forward(x); }, {"Flatten(start_dim=3"});
}

std::shared_ptr<nn::Sequential> bn_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::BatchNorm1d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 2)});
}

TEST(BatchNormLayer, DataParallelKeepsDeviceZerosStatistics) {
  // 2 devices, 6 rows: the module's running statistics are those of BatchNorm on rows 0-2.
  manual_seed(1);
  auto net = bn_net();
  auto alone = std::dynamic_pointer_cast<nn::Sequential>(net->clone());
  Tensor x = randn({6, 3});
  parallel::DataParallel dp(net, cpus(2));
  dp.forward_backward(x, randn({6, 2}), [](const Tensor& o, const Tensor& t) {
    return mse_loss(o, t);
  });
  alone->forward(narrow(x, 0, 0, 3));
  auto& bn = dynamic_cast<nn::BatchNorm1d&>(*net->children()[1]);
  auto& ref = dynamic_cast<nn::BatchNorm1d&>(*alone->children()[1]);
  const auto got = V(bn.running_mean), want = V(ref.running_mean);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1);
}

TEST(BatchNormLayer, DeterministicModeRefusesItInTraining) {
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.shard_size = 2;
  parallel::DataParallel dp(bn_net(), cpus(2), std::nullopt, o);
  const auto mse = [](const Tensor& out, const Tensor& t) { return mse_loss(out, t); };
  expect_error<ValueError>([&] { dp.forward_backward(randn({4, 3}), randn({4, 2}), mse); },
                           {"deterministic mode", "'1' (BatchNorm1d)", "SyncBatchNorm"});
  expect_error<ValueError>([&] { dp.forward(randn({4, 3})); }, {"'1' (BatchNorm1d)"});
  dp.eval();
  EXPECT_EQ(dp.forward(randn({4, 3})).shape(), (Shape{4, 2}));
}

}  // namespace
}  // namespace lockstep::testing
