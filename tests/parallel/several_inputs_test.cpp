// DataParallel with a module of several inputs and outputs (nn::Module::forward_args), PyTorch's
// scatter/gather rules (torch/nn/parallel/scatter_gather.py): tensor inputs split along dim 0 with
// the same sizes, a plain value to every replica, batched outputs gathered along dim 0, a 0-d
// output gathered into one value per chunk, autograd through all of them; trained on 1 and 3
// devices equal to one device (allclose; bit-identical in deterministic mode).
#include <gtest/gtest.h>

#include "lockstep/parallel/data_parallel.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

// forward_args({a [B, 3], b [B, 2], scale}) -> {fc(a) · scale + gc(b) [B, 2], its mean (0-d)}.
struct TwoInputs : nn::Cloneable<TwoInputs> {
  std::shared_ptr<nn::Linear> fc, gc;
  TwoInputs() { reset(); }
  void reset() override {
    fc = register_module("fc", std::make_shared<nn::Linear>(3, 2));
    gc = register_module("gc", std::make_shared<nn::Linear>(2, 2));
  }
  std::vector<Tensor> forward_args(const nn::Args& args) override {
    const Tensor& a = std::get<Tensor>(args.at(0));
    const Tensor& b = std::get<Tensor>(args.at(1));
    const double scale = std::get<double>(args.at(2));
    Tensor out = add(mul(fc->forward(a), scale), gc->forward(b));
    return {out, mean(out)};
  }
  std::string name() const override { return "TwoInputs"; }
};

std::shared_ptr<TwoInputs> make_model() {
  manual_seed(4);
  return std::make_shared<TwoInputs>();
}

std::vector<double> flat_grads(const nn::Module& m) {
  std::vector<double> out;
  for (auto& p : m.parameters()) {
    auto v = p.grad().to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

struct Data {
  Tensor a, b, y;
};
Data make_data(std::int64_t rows = 7) {
  manual_seed(8);
  return {randn({rows, 3}), randn({rows, 2}), randn({rows, 2})};
}

TEST(SeveralInputs, GatherPathScattersGathersAndDifferentiatesEveryOutput) {
  for (int n : {1, 3}) {
    SCOPED_TRACE("devices " + std::to_string(n));
    const Data d = make_data();
    // One device, plain module, chunk by chunk: the reference outputs and gradients.
    auto plain = make_model();
    Tensor a_ref = d.a.clone().requires_grad_(true);
    std::vector<Tensor> rows, means;
    std::int64_t start = 0;
    for (auto size : split_sizes(7, n)) {
      auto o = plain->forward_args({narrow(a_ref, 0, start, size), narrow(d.b, 0, start, size), 0.5});
      rows.push_back(o[0]);
      means.push_back(o[1]);
      start += size;
    }
    Tensor ref_out = cat(rows, 0);
    Tensor ref_loss = mse_loss(ref_out, d.y);
    for (const Tensor& m : means) ref_loss = add(ref_loss, m);
    ref_loss.backward();

    auto model = make_model();
    parallel::DataParallel dp(model, cpus(n));
    Tensor a = d.a.clone().requires_grad_(true);
    std::vector<Tensor> outs = dp.forward_args({a, d.b, 0.5});
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(outs[0].shape(), (Shape{7, 2}));
    EXPECT_EQ(outs[1].shape(), (Shape{n}));  // one value per chunk
    EXPECT_TRUE(AllClose(outs[0].to_vector<double>(), ref_out.to_vector<double>()));
    for (int k = 0; k < n; ++k)
      EXPECT_NEAR(outs[1].to_vector<double>()[static_cast<std::size_t>(k)],
                  means[static_cast<std::size_t>(k)].item(), 1e-6);
    add(mse_loss(outs[0], d.y), sum(outs[1])).backward();
    EXPECT_TRUE(AllClose(flat_grads(*model), flat_grads(*plain)));
    EXPECT_TRUE(AllClose(a.grad().to_vector<double>(), a_ref.grad().to_vector<double>()));
  }
}

// Three SGD steps through forward_backward with several inputs on `n` devices.
std::vector<double> train(int n, bool deterministic) {
  const Data d = make_data(12);
  auto model = make_model();
  parallel::DataParallelOptions o;
  o.deterministic = deterministic;
  o.shard_size = 2;
  parallel::DataParallel dp(model, cpus(n), std::nullopt, o);
  optim::SGD sgd(dp.parameters(), {.lr = 0.1});
  const parallel::ArgsLossFn loss = [](const std::vector<Tensor>& outs, const Tensor& y) {
    return add(mse_loss(outs[0], y), mul(outs[1], 0.0));
  };
  for (int s = 0; s < 3; ++s) {
    sgd.zero_grad();
    dp.forward_backward({d.a, d.b, 0.5}, d.y, loss);
    sgd.step();
  }
  return flat_params<double>(*model);
}

TEST(SeveralInputs, ReducerPathTrainsTheSameModelOnOneAndThreeDevices) {
  const auto one = train(1, false);
  EXPECT_TRUE(AllClose(train(3, false), one));
  EXPECT_NE(one, flat_params<double>(*make_model()));
  // Deterministic mode: bit for bit.
  EXPECT_EQ(train(3, true), train(1, true));
}

TEST(SeveralInputs, BadArgumentsAreRefusedWithTheArgumentNamed) {
  parallel::DataParallel dp(make_model(), cpus(2));
  const Data d = make_data();
  try {
    dp.forward_args({d.a, randn({5, 2}), 0.5});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("argument 1 has 5 rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dp.forward_args({0.5}), ShapeError);                       // nothing to split
  EXPECT_THROW(dp.forward_args({scalar_tensor(1.0), d.b, 0.5}), ShapeError);  // 0-d input
  EXPECT_THROW(dp.forward_backward({d.a, d.b, 0.5}, randn({6, 2}),
                                   [](const std::vector<Tensor>& o, const Tensor& y) {
                                     return mse_loss(o[0], y);
                                   }),
               ShapeError);  // target rows
  // A single-tensor module called with several arguments names itself.
  parallel::DataParallel linear(std::make_shared<nn::Linear>(3, 2), cpus(2));
  EXPECT_THROW(linear.forward_args({d.a, d.b}), ValueError);
}

// {logits [B, 2], their argmax [B] (int64)}: an output autograd does not flow through.
struct WithArgmax : nn::Cloneable<WithArgmax> {
  std::shared_ptr<nn::Linear> fc;
  WithArgmax() { reset(); }
  void reset() override { fc = register_module("fc", std::make_shared<nn::Linear>(3, 2)); }
  std::vector<Tensor> forward_args(const nn::Args& args) override {
    Tensor logits = fc->forward(std::get<Tensor>(args.at(0)));
    return {logits, argmax(logits, 1)};
  }
};

TEST(SeveralInputs, AnIntegerOutputIsGatheredBesideADifferentiableOne) {
  manual_seed(2);
  auto model = std::make_shared<WithArgmax>();
  parallel::DataParallel dp(model, cpus(3));
  const Data d = make_data();
  std::vector<Tensor> outs = dp.forward_args({d.a});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].dtype(), kInt64);
  EXPECT_EQ(outs[1].to_vector<std::int64_t>(), argmax(outs[0].detach(), 1).to_vector<std::int64_t>());
  EXPECT_FALSE(outs[1].requires_grad());
  mse_loss(outs[0], d.y).backward();
  for (auto& p : model->parameters()) EXPECT_TRUE(p.grad().defined());
}

}  // namespace
}  // namespace lockstep::testing
