// DataParallel behaviour beyond the golden runs and the cases: errors inside a replica, dropout
// keyed by sample, eval/no_grad, reducer buckets and overlap, device lists.
#include <gtest/gtest.h>

#include <atomic>

#include "lockstep/cuda/runtime.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

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
  // An empty entry is an error, not skipped (a trailing comma used to be accepted).
  EXPECT_THROW(parallel::parse_devices("cpu:0,"), DeviceError);
  EXPECT_THROW(parallel::parse_devices(",cpu:0"), DeviceError);
  EXPECT_THROW(parallel::parse_devices("cpu:0,,cpu:1"), DeviceError);
  // Without a GPU (any build): cuda:0 is unavailable and the defaults are the CPU cores
  // (tests/cuda/device_test.cpp covers machines with GPUs).
  if (cuda::device_count() == 0) {
    EXPECT_THROW(
        nn::DataParallel(std::make_shared<nn::Linear>(2, 2), {Device(DeviceType::CUDA, 0)}),
        DeviceError);
    EXPECT_EQ(static_cast<int>(parallel::default_devices().size()), usable_cores());
  }
}

}  // namespace
}  // namespace lockstep::testing

namespace lockstep::testing {
namespace {

// Targets equal to ignore_index do not count: every device count and both paths give the
// gradient of the mean over the counted targets (the 1-device plain model's).
TEST(DataParallel, IgnoredTargetsWeightChunksByWhatTheyCount) {
  manual_seed(21);
  auto base = std::make_shared<nn::Linear>(5, 3);
  Tensor x = randn({10, 5});
  Tensor y = tensor(std::vector<std::int64_t>{0, -100, 2, -100, -100, -100, 1, 2, -100, 0});
  auto ref = std::static_pointer_cast<nn::Linear>(base->clone());
  nn::CrossEntropyLoss ce;
  Tensor ref_loss = ce(ref->forward(x), y);
  ref_loss.backward();
  for (bool deterministic : {false, true})
    for (int n : {1, 2, 3, 4}) {
      for (bool reducer : {false, true}) {
        auto model = std::static_pointer_cast<nn::Linear>(base->clone());
        auto o = opts(deterministic);
        o.shard_size = 2;
        nn::DataParallel dp(model, cpus(n), std::nullopt, o);
        double loss = reducer ? dp.forward_backward(x, y, ce).item() : [&] {
          Tensor l = ce(dp.forward(x), y);
          l.backward();
          return l.item();
        }();
        EXPECT_TRUE(allclose(loss, ref_loss.item())) << n << " devices " << reducer;
        EXPECT_TRUE(AllClose(model->weight.grad(), ref->weight.grad()))
            << n << " devices " << reducer;
      }
    }
  // everything ignored: NaN loss, as PyTorch's mean over nothing
  nn::DataParallel dp(std::static_pointer_cast<nn::Linear>(base->clone()), cpus(2), std::nullopt,
                      opts());
  Tensor all_ignored = full({4}, -100, kInt64);
  EXPECT_TRUE(std::isnan(dp.forward_backward(x.narrow(0, 0, 4), all_ignored, ce).item()));
}

TEST(DataParallel, RetainGraphReachesTheReplicas) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  Tensor loss = dp.forward(randn({4, 3})).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  Tensor once = model->weight.grad().clone();
  loss.backward();
  EXPECT_TRUE(AllClose(model->weight.grad(), mul(once, 2.0)));
}

TEST(DataParallel, OutputDeviceNeedNotBeCpu0) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::DataParallel dp(model, {cpu(2), cpu(1)}, std::nullopt, opts());
  EXPECT_EQ(dp.output_device(), cpu(2));
  Tensor x = randn({5, 3});
  Tensor y = randint(0, 2, {5});
  dp.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_EQ(model->weight.grad().device(), cpu(2));
  Tensor out = dp.forward(x);
  EXPECT_EQ(out.device(), cpu(2));
  EXPECT_THROW(nn::CrossEntropyLoss()(out, y), DeviceError);  // labels must follow (as PyTorch)
  EXPECT_NO_THROW(nn::CrossEntropyLoss()(out, y.to(cpu(2))));
}

TEST(DataParallel, NonStandardExceptionsReachTheCallerAsErrors) {
  struct Thrower : nn::Cloneable<Thrower> {
    Thrower() { reset(); }
    void reset() override { register_parameter("w", ones({1})); }
    Tensor forward(const Tensor&) override { throw 42; }
  };
  nn::DataParallel dp(std::make_shared<Thrower>(), cpus(2), std::nullopt, opts());
  try {
    dp.forward(randn({4, 1}));
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:0"), std::string::npos) << e.what();
  }
}

TEST(DataParallel, FileErrorsInAReplicaKeepTheirType) {
  // IoError and DataError (file readers) keep their type through a replica, like the tensor
  // errors: the CLI maps them to exit status 2.
  struct Reader : nn::Cloneable<Reader> {
    bool io = true;
    Reader() { reset(); }
    void reset() override { register_parameter("w", ones({1})); }
    Tensor forward(const Tensor&) override {
      if (io) throw IoError("cannot open 'x.bin'");
      throw DataError("x.csv:3: ragged row");
    }
  };
  auto model = std::make_shared<Reader>();
  {
    nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
    expect_error<IoError>([&] { dp.forward(randn({4, 1})); }, {"cpu:0", "x.bin"});
  }
  model->io = false;
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  expect_error<DataError>([&] { dp.forward(randn({4, 1})); }, {"cpu:0", "x.csv:3"});
}

TEST(DataParallel, AmbiguousPrefixedKeysAreRejected) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  StateDict sd = dp.state_dict();
  sd.insert("module.weight", model->weight.clone());
  EXPECT_THROW(dp.load_state_dict(sd), StateDictError);
}

}  // namespace
}  // namespace lockstep::testing

namespace lockstep::testing {
namespace {

TEST(DataParallel, ReplacedParameterDataIsPickedUpMovedOneIsAnError) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  nn::DataParallel dp(model, cpus(2), std::nullopt, opts());
  Tensor x = randn({4, 3});
  Tensor fresh = randn({2, 3});
  model->weight.set_data(fresh.clone());  // PyTorch's `param.data = ...`
  Tensor out = dp.forward(x);
  Tensor want = model->forward(x);
  EXPECT_TRUE(AllClose(out, want));
  out.sum().backward();
  EXPECT_TRUE(model->weight.grad().defined());
  model->to(cpu(1));
  EXPECT_THROW(dp.forward(x), ValueError);
}

}  // namespace
}  // namespace lockstep::testing
