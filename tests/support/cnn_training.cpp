#include "support/cnn_training.h"

#include <gtest/gtest.h>

#include <tuple>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {

CnnTrained train_cnn(const CnnGolden& g, const CnnRun& run) {
  auto model = small_cnn(g.conv_bias);
  model->load_state_dict(g.initial);
  if (run.sync_bn) nn::convert_sync_batchnorm(model);
  std::unique_ptr<parallel::DataParallel> dp;
  std::int64_t part_start = 0, part_rows = g.batch_size;
  if (run.group) {
    parallel::DistributedDataParallelOptions o;
    o.device_ids = cpus(run.devices);
    o.deterministic = run.options.deterministic;
    o.shard_size = run.options.shard_size;
    dp = std::make_unique<parallel::DistributedDataParallel>(model, run.group, o);
    const auto parts = parallel::split_batch(g.batch_size, run.group->size(),
                                             o.deterministic ? o.shard_size : 0);
    std::tie(part_start, part_rows) = parts[static_cast<std::size_t>(run.group->rank())];
  } else if (run.how != CnnHow::Module) {
    dp = std::make_unique<parallel::DataParallel>(model, cpus(run.devices), std::nullopt,
                                                  run.options);
  }
  std::vector<Tensor> params = dp ? dp->parameters() : model->parameters();
  std::unique_ptr<optim::Optimizer> opt;
  if (g.optimizer == "sgd")
    opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = g.lr, .momentum = g.momentum});
  else
    opt = std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = g.lr});
  const nn::CrossEntropyLoss criterion;
  CnnTrained t;
  for (std::int64_t s = 0; s < g.steps; ++s) {
    const std::int64_t row = g.batch_size * (s % 2) + part_start;
    Tensor x = narrow(g.x, 0, row, part_rows), y = narrow(g.y, 0, row, part_rows);
    opt->zero_grad();
    Tensor loss;
    if (run.how == CnnHow::Reducer) {
      loss = dp->forward_backward(x, y, criterion);
    } else {
      loss = cross_entropy(run.how == CnnHow::Gather ? dp->forward(x) : model->forward(x), y);
      loss.backward();
    }
    opt->step();
    t.losses.push_back(loss.item());
    t.running_mean_1.push_back(
        dynamic_cast<nn::BatchNormBase&>(*model->children()[1]).running_mean.to_vector<double>());
  }
  model->eval();
  NoGradGuard no_grad;
  t.eval_output = model->forward(narrow(g.x, 0, 0, 8)).to_vector<double>();
  t.state = model->state_dict();
  return t;
}

void expect_cnn_matches(const CnnTrained& t, const CnnGolden::Expected& e,
                        const std::string& what) {
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
      EXPECT_EQ(mine->to_vector<std::int64_t>(), want.to_vector<std::int64_t>())
          << what << ": " << key;
    } else {
      EXPECT_TRUE(AllClose(mine->to_vector<double>(), want.to_vector<double>(), kCnnRtol, kCnnAtol))
          << what << ": " << key;
    }
  }
  EXPECT_TRUE(AllClose(t.eval_output, e.eval_output, kCnnRtol, kCnnAtol)) << what << ": eval";
}

void expect_cnn_bits_equal(const CnnTrained& a, const CnnTrained& b, const std::string& what) {
  EXPECT_EQ(b.losses, a.losses) << what;
  for (const std::string& key : a.state.keys()) {
    const Tensor& x = a.state.at(key);
    const Tensor& y = b.state.at(key);
    if (x.dtype() == kInt64)
      EXPECT_EQ(x.to_vector<std::int64_t>(), y.to_vector<std::int64_t>()) << what << ": " << key;
    else
      EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>()) << what << ": " << key;
  }
}

}  // namespace lockstep::testing
