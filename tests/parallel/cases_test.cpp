// Cases from real users' reports (shared/cases/README.md) that concern DataParallel: C01 scatter,
// C02/C03 reduce, C06 init, C07 unused parameters, C09 checkpoint names, C12 replica gradients.
#include <gtest/gtest.h>

#include <mutex>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using parallel::DataParallelOptions;

DataParallelOptions single_thread() {
  DataParallelOptions o;
  o.threads_per_device = 1;
  return o;
}

// Records (device index, batch size) of every forward call.
struct CallLog {
  std::mutex mu;
  std::vector<std::pair<int, std::int64_t>> calls;
};

struct LoggedMLP : nn::Cloneable<LoggedMLP> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<CallLog> log;
  explicit LoggedMLP(std::shared_ptr<CallLog> l) : log(std::move(l)) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 4));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(4, 1));
  }
  Tensor forward(const Tensor& x) override {
    {
      std::lock_guard<std::mutex> lock(log->mu);
      log->calls.emplace_back(x.device().index, x.size(0));
    }
    return fc2->forward(relu(fc1->forward(x)));
  }
};

TEST(CaseC01, ScatterSizesAndOneDeviceEquality) {
  const std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> cases = {
      {9, {3, 2, 2, 2}}, {13, {4, 3, 3, 3}}, {3, {1, 1, 1}}, {5, {2, 1, 1, 1}}, {1, {1}}};
  for (const auto& [batch, expected] : cases) {
    manual_seed(1);
    auto log = std::make_shared<CallLog>();
    auto plain = std::make_shared<LoggedMLP>(log);
    auto reference = std::static_pointer_cast<LoggedMLP>(plain->clone());
    nn::DataParallel dp(plain, cpus(4), std::nullopt, single_thread());
    Tensor x = randn({batch, 8});
    log->calls.clear();
    Tensor out = dp.forward(x);
    std::vector<std::int64_t> sizes(4, 0);
    for (auto [dev, n] : log->calls) sizes[static_cast<std::size_t>(dev)] = n;
    std::vector<std::int64_t> got(sizes.begin(), sizes.begin() + static_cast<long>(expected.size()));
    EXPECT_EQ(got, expected) << "batch " << batch;
    EXPECT_EQ(log->calls.size(), expected.size()) << "batch " << batch << ": replicas called";
    out.sum().backward();
    Tensor ref_out = reference->forward(x);
    ref_out.sum().backward();
    EXPECT_TRUE(AllClose(out, ref_out)) << "batch " << batch;
    auto dp_params = dp.named_parameters(), ref_params = reference->named_parameters();
    for (std::size_t i = 0; i < dp_params.size(); ++i)
      EXPECT_TRUE(AllClose(dp_params[i].second.grad(), ref_params[i].second.grad()))
          << dp_params[i].first << " batch " << batch;
  }
}

// w·x per sample, one scalar parameter.
struct ScalarModel : nn::Cloneable<ScalarModel> {
  Tensor w;
  ScalarModel() { reset(); }
  void reset() override { w = register_parameter("w", ones({1})); }
  Tensor forward(const Tensor& x) override { return mul(x, w); }
};

Tensor x_1_to(int n) { return arange(1.0, n + 1.0, 1.0, kFloat32).reshape({n, 1}); }

TEST(CaseC02, GradientIsTheGlobalMean) {
  for (bool reducer : {false, true}) {
    auto model = std::make_shared<ScalarModel>();
    nn::DataParallel dp(model, cpus(2), std::nullopt, single_thread());
    optim::SGD opt(dp.parameters(), {.lr = 0.1});
    Tensor x = x_1_to(13);
    auto mean_loss = [](const Tensor& out, const Tensor&) { return mean(out); };
    if (reducer)
      dp.forward_backward(x, x, mean_loss);
    else
      mean(dp.forward(x)).backward();
    // allclose, as the cases define float equality: 7.0 up to rounding, never 7.25 (the mean
    // of the two replica means) nor 14 (their sum)
    EXPECT_TRUE(allclose(model->w.grad().item(), 7.0)) << model->w.grad().item()
                                                       << (reducer ? " reducer" : " gather");
    opt.step();
    EXPECT_FLOAT_EQ(static_cast<float>(model->w.item()), 1.0f - 0.7f);
  }
}

TEST(CaseC03, MeanOfSquaresMatchesOneDevice) {
  for (bool reducer : {false, true}) {
    for (int devices : {1, 4}) {
      auto model = std::make_shared<ScalarModel>();
      nn::DataParallel dp(model, cpus(devices), std::nullopt, single_thread());
      optim::SGD opt(dp.parameters(), {.lr = 0.01});
      Tensor x = x_1_to(8);
      auto loss = [](const Tensor& out, const Tensor&) { return mean(mul(out, out)); };
      if (reducer)
        dp.forward_backward(x, x, loss);
      else
        loss(dp.forward(x), x).backward();
      EXPECT_TRUE(allclose(model->w.grad().item(), 51.0)) << model->w.grad().item() << " on "
                                                         << devices << " devices";
      opt.step();
      EXPECT_TRUE(allclose(model->w.item(), 0.49)) << model->w.item();
    }
  }
}

TEST(CaseC06, ReplicasStartAndStayIdenticalToTheMaster) {
  manual_seed(11);
  auto a = std::make_shared<nn::Linear>(4, 2);
  manual_seed(22);
  auto b = std::make_shared<nn::Linear>(4, 2);  // a different init, wrapped the same way
  for (auto model : {a, b}) {
    nn::DataParallel dp(model, cpus(2), std::nullopt, single_thread());
    for (std::size_t k = 0; k < 2; ++k)
      EXPECT_TRUE(BitEqual(dp.replica(k)->named_parameters()[0].second, model->weight));
    optim::SGD opt(dp.parameters(), {.lr = 0.1});
    Tensor x = randn({6, 4});
    Tensor y = randint(0, 2, {6});
    dp.forward_backward(x, y, nn::CrossEntropyLoss());
    opt.step();
    dp.forward(x);  // replicas receive the stepped parameters before each forward
    for (std::size_t k = 0; k < 2; ++k) {
      auto rp = dp.replica(k)->named_parameters();
      EXPECT_TRUE(BitEqual(rp[0].second, model->weight));
      EXPECT_TRUE(BitEqual(rp[1].second, model->bias));
    }
  }
}

struct PartlyUsed : nn::Cloneable<PartlyUsed> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  PartlyUsed() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 2));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(2, 2));
  }
  Tensor forward(const Tensor& x) override { return fc1->forward(x); }  // fc2 never used
};

TEST(CaseC07, UnusedParametersUntouchedNoMomentumNoHang) {
  for (bool reducer : {false, true}) {
    manual_seed(3);
    auto model = std::make_shared<PartlyUsed>();
    auto reference = std::static_pointer_cast<PartlyUsed>(model->clone());
    Tensor fc2_w = model->fc2->weight.clone(), fc2_b = model->fc2->bias.clone();
    nn::DataParallel dp(model, cpus(2), std::nullopt, single_thread());
    optim::SGDOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
    optim::SGD opt(dp.parameters(), o), ref_opt(reference->parameters(), o);
    nn::CrossEntropyLoss ce;
    for (int step = 0; step < 5; ++step) {
      Tensor x = randn({4, 3});
      Tensor y = randint(0, 2, {4});
      opt.zero_grad();
      ref_opt.zero_grad();
      if (reducer)
        dp.forward_backward(x, y, ce);
      else
        ce(dp.forward(x), y).backward();
      EXPECT_FALSE(model->fc2->weight.grad().defined());
      opt.step();
      ce(reference->forward(x), y).backward();
      ref_opt.step();
    }
    EXPECT_TRUE(BitEqual(model->fc2->weight, fc2_w));
    EXPECT_TRUE(BitEqual(model->fc2->bias, fc2_b));
    // parameters() order: fc1.weight, fc1.bias, fc2.weight, fc2.bias
    EXPECT_FALSE(opt.state(2, "momentum_buffer").defined());
    EXPECT_FALSE(opt.state(3, "momentum_buffer").defined());
    EXPECT_TRUE(opt.state(0, "momentum_buffer").defined());
    EXPECT_TRUE(AllClose(model->fc1->weight, reference->fc1->weight));
    EXPECT_TRUE(AllClose(model->fc1->bias, reference->fc1->bias));
  }
}

struct TwoLayer : nn::Cloneable<TwoLayer> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  TwoLayer() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 1));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

TEST(CaseC09, CheckpointNamesWithoutModulePrefix) {
  manual_seed(5);
  auto wrapped_model = std::make_shared<TwoLayer>();
  nn::DataParallel dp(wrapped_model, cpus(2), std::nullopt, single_thread());
  auto plain = std::make_shared<TwoLayer>();
  StateDict from_dp = dp.state_dict();
  EXPECT_EQ(from_dp.keys(), plain->state_dict().keys());
  EXPECT_EQ(from_dp.keys(), (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  plain->load_state_dict(from_dp);  // wrapper -> plain, strict
  for (const auto& [k, v] : from_dp) EXPECT_TRUE(BitEqual(plain->state_dict().at(k), v)) << k;
  manual_seed(6);
  auto other = std::make_shared<TwoLayer>();
  dp.load_state_dict(other->state_dict());  // plain -> wrapper, strict
  for (const auto& [k, v] : other->state_dict()) EXPECT_TRUE(BitEqual(dp.state_dict().at(k), v)) << k;
  StateDict prefixed;  // as PyTorch's DataParallel saves it
  manual_seed(7);
  auto third = std::make_shared<TwoLayer>();
  for (const auto& [k, v] : third->state_dict()) prefixed.insert("module." + k, v);
  dp.load_state_dict(prefixed);
  for (const auto& [k, v] : third->state_dict()) EXPECT_TRUE(BitEqual(dp.state_dict().at(k), v)) << k;
}

TEST(CaseC12, ReplicaGradientsReachTheMaster) {
  manual_seed(12);
  auto make = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(784, 64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(64, 10)});
  };
  auto model = make();
  auto reference = std::static_pointer_cast<nn::Sequential>(model->clone());
  // two well-separated classes: class 0 around -1, class 1 around +1
  Generator gen(12);
  Tensor labels = randint(0, 2, {64}, kInt64, &gen);
  Tensor centers = sub(mul(labels.to(kFloat32).reshape({64, 1}), 2.0), ones({64, 1}));
  Tensor x = add(mul(randn({64, 784}, {}, &gen), 0.3), centers);
  nn::DataParallel dp(model, cpus(2), std::nullopt, single_thread());
  nn::CrossEntropyLoss ce;
  ce(dp.forward(x), labels).backward();
  ce(reference->forward(x), labels).backward();
  auto got = dp.named_parameters(), want = reference->named_parameters();
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].second.grad().defined()) << got[i].first;
    EXPECT_TRUE(AllClose(got[i].second.grad(), want[i].second.grad(), 1e-5, 1e-6)) << got[i].first;
  }
  optim::SGD opt(dp.parameters(), {.lr = 0.1});
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    double l = dp.forward_backward(x, labels, ce).item();
    if (step == 0) first = l;
    last = l;
    opt.step();
  }
  EXPECT_LT(last, first * 0.5) << "loss " << first << " -> " << last;
}

}  // namespace
}  // namespace lockstep::testing
