// The CNN golden trajectories (tests/data/cnn/, PyTorch's numbers): a small CNN with BatchNorm
// trained with SGD + momentum and with Adam reproduces PyTorch's losses, layer 1's running_mean
// after every step, the final parameters and buffers (num_batches_tracked exactly) and the
// eval-mode output: as a plain module, through DataParallel on one device, and on 2 and 3
// devices against PyTorch run chunk by chunk as DataParallel runs it (make_cnn_golden.py), over
// forward_backward and over the gather path.
#include <gtest/gtest.h>

#include "support/cnn_golden.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

// Conv and BatchNorm sum in other orders than PyTorch's kernels; four steps of training on
// top of that stay within these (float32).
constexpr double kCnnRtol = 1e-4, kCnnAtol = 1e-5;

enum class How { Module, Reducer, Gather };

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<double>> running_mean_1;
  StateDict state;
  std::vector<double> eval_output;
};

Trained train(const CnnGolden& g, int devices, How how) {
  auto model = small_cnn(g.conv_bias);
  model->load_state_dict(g.initial);
  std::unique_ptr<parallel::DataParallel> dp;
  if (how != How::Module) dp = std::make_unique<parallel::DataParallel>(model, cpus(devices));
  std::vector<Tensor> params = dp ? dp->parameters() : model->parameters();
  std::unique_ptr<optim::Optimizer> opt;
  if (g.optimizer == "sgd")
    opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = g.lr, .momentum = g.momentum});
  else
    opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = g.lr});
  const nn::CrossEntropyLoss criterion;
  Trained t;
  for (std::int64_t s = 0; s < g.steps; ++s) {
    const std::int64_t row = g.batch_size * (s % 2);
    Tensor x = narrow(g.x, 0, row, g.batch_size), y = narrow(g.y, 0, row, g.batch_size);
    opt->zero_grad();
    Tensor loss;
    if (how == How::Reducer) {
      loss = dp->forward_backward(x, y, criterion);
    } else {
      loss = cross_entropy(how == How::Gather ? dp->forward(x) : model->forward(x), y);
      loss.backward();
    }
    opt->step();
    t.losses.push_back(loss.item());
    t.running_mean_1.push_back(
        dynamic_cast<nn::BatchNorm2d&>(*model->children()[1]).running_mean.to_vector<double>());
  }
  model->eval();
  NoGradGuard no_grad;
  t.eval_output = model->forward(narrow(g.x, 0, 0, 8)).to_vector<double>();
  t.state = model->state_dict();
  return t;
}

void expect_matches(const Trained& t, const CnnGolden::Expected& e, const std::string& what) {
  EXPECT_TRUE(AllClose(t.losses, e.step_losses, kCnnRtol, kCnnAtol)) << what << ": losses";
  ASSERT_EQ(t.running_mean_1.size(), e.running_mean_1.size()) << what;
  for (std::size_t s = 0; s < t.running_mean_1.size(); ++s)
    EXPECT_TRUE(AllClose(t.running_mean_1[s], e.running_mean_1[s], kCnnRtol, kCnnAtol))
        << what << ": 1.running_mean after step " << s;
  EXPECT_EQ(t.state.keys(), e.final_state.keys()) << what;
  for (const std::string& key : e.final_state.keys()) {
    const Tensor* mine = t.state.find(key);
    ASSERT_NE(mine, nullptr) << what << ": " << key;
    const Tensor& want = e.final_state.at(key);
    ASSERT_EQ(mine->shape(), want.shape()) << what << ": " << key;
    if (want.dtype() == kInt64) {
      EXPECT_EQ(mine->dtype(), kInt64) << what << ": " << key;
      EXPECT_EQ(mine->to_vector<std::int64_t>(), want.to_vector<std::int64_t>()) << what << ": " << key;
    } else {
      EXPECT_TRUE(AllClose(mine->to_vector<double>(), want.to_vector<double>(), kCnnRtol, kCnnAtol))
          << what << ": " << key;
    }
  }
  EXPECT_TRUE(AllClose(t.eval_output, e.eval_output, kCnnRtol, kCnnAtol)) << what << ": eval";
}

class CnnGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CnnGoldenTest, OneDeviceMatchesPyTorch) {
  const CnnGolden g = load_cnn_golden(GetParam());
  expect_matches(train(g, 1, How::Module), g.expected.at(1), g.name + " module");
  expect_matches(train(g, 1, How::Reducer), g.expected.at(1), g.name + " DataParallel(cpu:0)");
}

TEST_P(CnnGoldenTest, DataParallelMatchesPyTorchChunkByChunk) {
  const CnnGolden g = load_cnn_golden(GetParam());
  for (int devices : {2, 3})
    for (How how : {How::Reducer, How::Gather})
      expect_matches(train(g, devices, how), g.expected.at(devices),
                     g.name + " on " + std::to_string(devices) + " devices, " +
                         (how == How::Reducer ? "forward_backward" : "gather path"));
}

INSTANTIATE_TEST_SUITE_P(Files, CnnGoldenTest,
                         ::testing::Values("cnn_sgd_momentum", "cnn_adam"));

}  // namespace
}  // namespace lockstep::testing
