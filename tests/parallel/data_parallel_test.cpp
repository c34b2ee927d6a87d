// DataParallel behaviour beyond the golden runs and the cases: errors inside a replica, dropout
// keyed by sample, eval/no_grad, reducer buckets and overlap, device lists.
#include <gtest/gtest.h>

#include <atomic>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

parallel::DataParallelOptions opts(bool deterministic = false) {
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  o.deterministic = deterministic;
  return o;
}

std::atomic<bool> g_fail_on_cpu1{false};

// Throws a ShapeError on cpu:1 while g_fail_on_cpu1 is set.
struct Faulty : nn::Cloneable<Faulty> {
  std::shared_ptr<nn::Linear> fc;
  Faulty() { reset(); }
  void reset() override { fc = register_module("fc", std::make_shared<nn::Linear>(3, 2)); }
  Tensor forward(const Tensor& x) override {
    if (g_fail_on_cpu1 && x.device().index == 1) return fc->forward(reshape(x, {-1, 1}));
    return fc->forward(x);
  }
};

TEST(DataParallel, ReplicaErrorKeepsItsTypeAndNamesTheDeviceThenNextStepWorks) {
  auto model = std::make_shared<Faulty>();
  nn::DataParallel dp(model, cpus(3), std::nullopt, opts());
  Tensor x = randn({6, 3});
  Tensor y = randint(0, 2, {6});
  g_fail_on_cpu1 = true;
  for (bool reducer : {false, true}) {
    try {
      if (reducer)
        dp.forward_backward(x, y, nn::CrossEntropyLoss());
      else
        dp.forward(x);
      FAIL() << "expected ShapeError";
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("cpu:1"), std::string::npos) << e.what();
    }
  }
  g_fail_on_cpu1 = false;
  Tensor loss = dp.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_TRUE(model->fc->weight.grad().defined());
  Tensor out = dp.forward(x);
  EXPECT_EQ(out.shape(), Shape({6, 2}));
}

std::shared_ptr<nn::Sequential> dropout_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(16, 3)});
}

TEST(DataParallel, DropoutMasksDoNotDependOnTheDeviceCount) {
  manual_seed(4);
  auto base = dropout_mlp();
  Tensor x = randn({13, 6});
  Tensor y = randint(0, 3, {13});
  std::vector<StateDict> finals;
  std::vector<Tensor> first_outputs;
  for (int n : {1, 2, 3, 5}) {
    auto model = std::static_pointer_cast<nn::Sequential>(base->clone());
    nn::DataParallel dp(model, cpus(n), std::nullopt, opts(true));
    optim::SGD opt(dp.parameters(), {.lr = 0.1});
    first_outputs.push_back(dp.forward(x).detach());
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      dp.forward_backward(x, y, nn::CrossEntropyLoss());
      opt.step();
    }
    finals.push_back(dp.state_dict());
  }
  for (std::size_t i = 1; i < finals.size(); ++i) {
    EXPECT_TRUE(BitEqual(first_outputs[i], first_outputs[0])) << "device count #" << i;
    for (const auto& [k, v] : finals[0]) EXPECT_TRUE(BitEqual(finals[i].at(k), v)) << k;
  }
  // training mode really drops: some outputs differ from eval mode
  auto model = std::static_pointer_cast<nn::Sequential>(base->clone());
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  Tensor train_out = dp.forward(x);
  dp.eval();
  Tensor eval_out = dp.forward(x);
  EXPECT_FALSE(AllClose(train_out, eval_out));
}

TEST(DataParallel, EvalAndNoGradRecordNothing) {
  auto model = std::make_shared<nn::Linear>(4, 2);
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  Tensor x = randn({5, 4});
  {
    no_grad guard;
    Tensor out = dp.forward(x);
    EXPECT_FALSE(out.requires_grad());
    EXPECT_EQ(out.grad_fn(), nullptr);
  }
  Tensor out = dp.forward(x);
  EXPECT_TRUE(out.requires_grad());
}

TEST(DataParallel, BucketsAndOverlapDoNotChangeGradients) {
  manual_seed(8);
  auto base = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(32, 4)});
  Tensor x = randn({17, 20});
  Tensor y = randint(0, 4, {17});
  std::vector<std::vector<float>> grads;
  std::vector<std::size_t> buckets;
  for (auto [cap, overlap] : std::vector<std::pair<std::int64_t, bool>>{
           {25 << 20, true}, {512, true}, {512, false}, {1, true}}) {
    auto model = std::static_pointer_cast<nn::Sequential>(base->clone());
    auto o = opts();
    o.reducer.bucket_cap_bytes = cap;
    o.reducer.overlap = overlap;
    nn::DataParallel dp(model, cpus(3), std::nullopt, o);
    dp.forward_backward(x, y, nn::CrossEntropyLoss());
    std::vector<float> g;
    for (auto& p : dp.parameters())
      for (float v : p.grad().to_vector<float>()) g.push_back(v);
    grads.push_back(g);
  }
  for (std::size_t i = 1; i < grads.size(); ++i) EXPECT_EQ(grads[i], grads[0]) << "config " << i;
  // a 1-byte cap gives one bucket per parameter
  auto model = std::static_pointer_cast<nn::Sequential>(base->clone());
  auto flat = parallel::FlatBuffer::build(model->parameters(), cpu(0));
  auto group = dist::new_thread_group(1);
  parallel::GradientReducer small(flat, group[0], {.bucket_cap_bytes = 1});
  EXPECT_EQ(small.num_buckets(), model->parameters().size());
  parallel::GradientReducer big(flat, group[0], {});
  EXPECT_EQ(big.num_buckets(), 1u);
}

TEST(DataParallel, AccumulatesIntoExistingGradientsLikeBackward) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  Tensor x = randn({4, 3});
  Tensor y = randint(0, 2, {4});
  dp.forward_backward(x, y, nn::CrossEntropyLoss());
  Tensor once = model->weight.grad().clone();
  dp.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_TRUE(AllClose(model->weight.grad(), mul(once, 2.0)));
}

TEST(DataParallel, BackwardAfterTheWrapperIsGoneThrows) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  Tensor out;
  {
    nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
    out = dp.forward(randn({4, 3}));
  }
  EXPECT_THROW(out.sum().backward(), Error);
}

TEST(DataParallel, DeviceListsAreValidated) {
  EXPECT_EQ(parallel::parse_devices("cpu:0,cpu:1,cpu:2").size(), 3u);
  EXPECT_THROW(parallel::parse_devices("cpu:0,cpu:0"), ValueError);
  EXPECT_THROW(parallel::parse_devices("cpu:0,gpu:1"), DeviceError);
  EXPECT_THROW(parallel::parse_devices(""), ValueError);
  EXPECT_THROW(nn::DataParallel(std::make_shared<nn::Linear>(2, 2), {Device(DeviceType::CUDA, 0)}), DeviceError);
  EXPECT_EQ(static_cast<int>(parallel::default_devices().size()), usable_cores());
}

}  // namespace
}  // namespace lockstep::testing
