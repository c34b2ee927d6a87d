// Adversarial probes of DataParallel::register_fused_optim (breaker): situations the fused
// optimizer promises to handle bit-identically to forward_backward() + optimizer.step() that
// fused_optim_test.cpp does not cover — float64 models, optimizers holding the parameters in
// another order or a subset, zero_grad(set_to_none=false), batches smaller than the device count
// and empty ones, re-registering mid-training, optimizer / model load_state_dict between steps,
// a parameter's data replaced between steps, a .grad held by the caller, parameters that get a
// gradient on some replicas only (and on some steps only), a loss function that throws on one
// replica.
#include <gtest/gtest.h>

#include <functional>

#include "support/helpers.h"
#include "support/tolerance.h"
#include "support/trained_state.h"

namespace lockstep::testing {
namespace {

// Linear(6, 16) - Tanh - Linear(16, 3); `extra` (Linear(6, 3)) is added to the output only for
// chunks whose first feature sum is positive, so on some replicas / steps it gets a gradient and
// on others it does not.
struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::Linear> fc1, fc2, extra;
  Net() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
    extra = register_module("extra", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor out = fc2->forward(tanh(fc1->forward(x)));
    if (x.size(0) > 0 && narrow(x, 1, 0, 1).sum().item() > 0) out = add(out, extra->forward(x));
    return out;
  }
};

std::shared_ptr<Net> make_net(DType dtype = kFloat32) {
  manual_seed(7);
  auto net = std::make_shared<Net>();
  if (dtype != kFloat32) net->to(dtype);
  return net;
}

parallel::DataParallelOptions options(std::int64_t cap = 256) {
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  o.reducer.bucket_cap_bytes = cap;
  o.seed = 3;
  return o;
}

using MakeOpt = std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::vector<std::pair<std::string, MakeOpt>> optimizers() {
  return {
      {"sgd momentum nesterov wd",
       [](std::vector<Tensor> p) {
         return std::make_shared<optim::SGD>(
             std::move(p),
             optim::SGDOptions{
                 .lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
      {"adam wd",
       [](std::vector<Tensor> p) {
         return std::make_shared<optim::Adam>(std::move(p),
                                              optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
      {"adamw",
       [](std::vector<Tensor> p) {
         return std::make_shared<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 0.02});
       }},
  };
}

struct Data {
  std::vector<Tensor> x, y;
};
Data data(std::vector<std::int64_t> sizes, DType dtype = kFloat32) {
  manual_seed(11);
  Data d;
  for (auto n : sizes) {
    d.x.push_back(randn({n, 6}).to(dtype));
    d.y.push_back(randint(0, 3, {n}));
  }
  return d;
}

// One training run; `between(step, dp, opt)` runs before each step's zero_grad.
using Between = std::function<void(std::size_t, nn::DataParallel&, optim::Optimizer&)>;
struct TrainRun {
  int devices = 2;
  DType dtype = kFloat32;
  bool set_to_none = true;
  // Which master parameters the optimizer holds, in its order (empty: all, in order).
  std::vector<std::size_t> order;
  Between between;
};

TrainedState train(const TrainRun& r, const MakeOpt& make_opt, bool fused, const Data& d) {
  auto net = make_net(r.dtype);
  nn::DataParallel dp(net, cpus(r.devices), std::nullopt, options());
  std::vector<Tensor> params = dp.parameters();
  if (!r.order.empty()) {
    std::vector<Tensor> chosen;
    for (auto i : r.order) chosen.push_back(params[i]);
    params = chosen;
  }
  auto opt = make_opt(params);
  if (fused) dp.register_fused_optim(opt);
  for (std::size_t s = 0; s < d.x.size(); ++s) {
    if (r.between) r.between(s, dp, *opt);
    opt->zero_grad(r.set_to_none);
    dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
    if (!fused) opt->step();
  }
  return trained_state(*net, *opt);
}

void compare(const TrainRun& r, const Data& d, const std::string& what) {
  for (const auto& [name, make_opt] : optimizers())
    expect_bit_equal(train(r, make_opt, true, d), train(r, make_opt, false, d), name + ", " + what);
}

const std::vector<std::int64_t> kSizes = {13, 11, 4, 9, 7};

TEST(FusedOptimBreak, Float64Model) {
  const Data d = data(kSizes, kFloat64);
  for (int n : {1, 2, 3}) compare({.devices = n, .dtype = kFloat64}, d, "float64");
}

TEST(FusedOptimBreak, ParametersInAnotherOrderAndASubset) {
  const Data d = data(kSizes);
  compare({.devices = 3, .order = {5, 4, 3, 2, 1, 0}}, d, "reversed order");
  compare({.devices = 3, .order = {2, 0, 5}}, d, "subset, shuffled");
}

TEST(FusedOptimBreak, ZeroGradSetToNoneFalse) {
  const Data d = data(kSizes);
  for (int n : {1, 2, 3}) compare({.devices = n, .set_to_none = false}, d, "set_to_none=false");
}

TEST(FusedOptimBreak, BatchesSmallerThanTheDeviceCountAndEmptyBatches) {
  const Data d = data({2, 0, 1, 5, 0, 3});
  for (int n : {2, 5}) compare({.devices = n}, d, std::to_string(n) + " devices, tiny batches");
}

TEST(FusedOptimBreak, ParametersWithAGradientOnSomeReplicasAndSomeStepsOnly) {
  // `extra` is used by chunks whose first feature sums positive: on some replicas, some steps.
  const Data d = data({13, 11, 4, 9, 7, 12, 6, 10});
  for (int n : {2, 3, 4}) compare({.devices = n}, d, std::to_string(n) + " devices, extra");
}

TEST(FusedOptimBreak, OptimizerLoadStateDictBetweenSteps) {
  const Data d = data(kSizes);
  StateDict saved;
  TrainRun r{.devices = 3};
  r.between = [&saved](std::size_t s, nn::DataParallel&, optim::Optimizer& opt) {
    if (s == 2) saved = opt.state_dict();
    if (s == 4) opt.load_state_dict(saved);  // back to the state after 2 steps
  };
  compare(r, d, "optimizer load_state_dict");
}

TEST(FusedOptimBreak, ModelLoadStateDictAndSetDataBetweenSteps) {
  const Data d = data(kSizes);
  StateDict saved;
  TrainRun r{.devices = 2};
  r.between = [&saved](std::size_t s, nn::DataParallel& dp, optim::Optimizer&) {
    if (s == 1) saved = dp.state_dict();
    if (s == 3) dp.load_state_dict(saved);
    if (s == 4) {
      // PyTorch's param.data = ...: a new tensor of the same shape
      Tensor p = dp.parameters()[0];
      p.set_data(mul(p.detach(), 0.5));
    }
  };
  compare(r, d, "model load_state_dict / set_data");
}

TEST(FusedOptimBreak, ReRegisteringAnotherOptimizerMidTraining) {
  const Data d = data(kSizes);
  const auto opts = optimizers();
  TrainedState out[2];
  for (bool fused : {false, true}) {
    auto net = make_net();
    nn::DataParallel dp(net, cpus(3), std::nullopt, options());
    auto a = opts[0].second(dp.parameters());
    auto b = opts[1].second(dp.parameters());
    for (std::size_t s = 0; s < d.x.size(); ++s) {
      auto& opt = s < 2 ? a : b;
      if (fused) dp.register_fused_optim(opt);
      opt->zero_grad();
      dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
      if (!fused) opt->step();
    }
    out[fused] = trained_state(*net, *b);
    EXPECT_TRUE(a->state(0, "momentum_buffer").defined());
  }
  expect_bit_equal(out[1], out[0], "re-registered");
}

TEST(FusedOptimBreak, AGradHeldByTheCallerKeepsItsValues) {
  const Data d = data(kSizes);
  for (const auto& [name, make_opt] : optimizers()) {
    TrainedState out[2];
    for (bool fused : {false, true}) {
      auto net = make_net();
      nn::DataParallel dp(net, cpus(2), std::nullopt, options());
      auto opt = make_opt(dp.parameters());
      if (fused) dp.register_fused_optim(opt);
      std::vector<Tensor> held, copies;
      for (std::size_t s = 0; s < d.x.size(); ++s) {
        opt->zero_grad();
        dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
        if (!fused) opt->step();
        if (s == 1)
          for (auto& p : dp.parameters())
            if (p.grad().defined()) {
              held.push_back(p.grad());
              copies.push_back(p.grad().clone());
            }
      }
      for (std::size_t i = 0; i < held.size(); ++i)
        EXPECT_TRUE(BitEqual(held[i], copies[i])) << name << " fused " << fused << ": held " << i;
      out[fused] = trained_state(*net, *opt);
    }
    expect_bit_equal(out[1], out[0], name + ", held grad");
  }
}

TEST(FusedOptimBreak, ALossFunctionThatThrowsOnOneReplicaUpdatesNothing) {
  const Data d = data(kSizes);
  for (const auto& [name, make_opt] : optimizers()) {
    TrainedState out[2];
    for (bool fused : {false, true}) {
      auto net = make_net();
      nn::DataParallel dp(net, cpus(3), std::nullopt, options());
      auto opt = make_opt(dp.parameters());
      if (fused) dp.register_fused_optim(opt);
      opt->zero_grad();
      dp.forward_backward(d.x[0], d.y[0], nn::CrossEntropyLoss());
      if (!fused) opt->step();
      TrainedState before = trained_state(*net, *opt);
      opt->zero_grad();
      // Chunks of 11 on 3 devices: 4, 4, 3; the one of 3 rows throws.
      parallel::LossFn bad = [](const Tensor& out, const Tensor& y) {
        if (out.size(0) == 3) throw ValueError("bad chunk");
        return nn::CrossEntropyLoss()(out, y);
      };
      expect_error<ValueError>([&] { dp.forward_backward(d.x[1], d.y[1], bad); },
                               {"cpu:2", "bad chunk"});
      TrainedState after = trained_state(*net, *opt);
      for (std::size_t i = 0; i < before.params.size(); ++i)
        EXPECT_TRUE(BitEqual(after.params[i], before.params[i])) << name << ": parameter " << i;
      for (std::size_t s = 2; s < d.x.size(); ++s) {
        opt->zero_grad();
        dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
        if (!fused) opt->step();
      }
      out[fused] = trained_state(*net, *opt);
    }
    expect_bit_equal(out[1], out[0], name + ", after a throwing loss");
  }
}

}  // namespace
}  // namespace lockstep::testing

namespace lockstep::testing {
namespace {

// BUG (fails on main): in deterministic mode no_sync() is a documented no-op for the reduction
// (every call reduces into .grad), but register_fused_optim promises that a call inside no_sync()
// does not step. forward_backward_deterministic sets reduced_ for every call, so the fused
// optimizer steps on each call inside the guard too: gradient accumulation (K-1 calls inside
// no_sync, the K-th outside, one step) makes K steps on partial sums instead of one. The CLI hits
// it with `lockstep train --deterministic --accumulate-steps K` (no --clip-grad-norm).
TEST(FusedOptimBreak, DeterministicNoSyncCallsDoNotStep) {
  const Data d = data(kSizes);
  for (const auto& [name, make_opt] : optimizers())
    for (int n : {1, 2}) {
      TrainedState out[2];
      for (bool fused : {false, true}) {
        auto net = make_net();
        auto o = options();
        o.deterministic = true;
        nn::DataParallel dp(net, cpus(n), std::nullopt, o);
        auto opt = make_opt(dp.parameters());
        if (fused) dp.register_fused_optim(opt);
        opt->zero_grad();
        Tensor w = net->fc1->weight.detach().clone();
        {
          auto guard = dp.no_sync();
          dp.forward_backward(d.x[0], d.y[0], nn::CrossEntropyLoss());
          dp.forward_backward(d.x[1], d.y[1], nn::CrossEntropyLoss());
        }
        EXPECT_TRUE(BitEqual(net->fc1->weight, w))
            << name << ", " << n << " devices, fused " << fused << ": a no_sync() call stepped";
        dp.forward_backward(d.x[2], d.y[2], nn::CrossEntropyLoss());
        if (!fused) opt->step();
        out[fused] = trained_state(*net, *opt);
      }
      expect_bit_equal(out[1], out[0],
                       name + ", " + std::to_string(n) + " devices, deterministic no_sync");
    }
}

}  // namespace
}  // namespace lockstep::testing

namespace lockstep::testing {
namespace {

// Linear(6, 0) - Linear(0, 3): a weight and a bias with no elements in the flat buffer (equal
// offsets), then a bias-only output, plus Linear(6, 3) so there is something to learn.
struct Thin : nn::Cloneable<Thin> {
  std::shared_ptr<nn::Linear> a, b, c;
  Thin() { reset(); }
  void reset() override {
    a = register_module("a", std::make_shared<nn::Linear>(6, 0));
    b = register_module("b", std::make_shared<nn::Linear>(0, 3));
    c = register_module("c", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override { return add(b->forward(a->forward(x)), c->forward(x)); }
};

TEST(FusedOptimBreak, OptimizerBuiltBeforeWrappingAndEmptyParameters) {
  const Data d = data(kSizes);
  for (const auto& [name, make_opt] : optimizers()) {
    TrainedState out[2];
    for (bool fused : {false, true}) {
      manual_seed(5);
      auto net = std::make_shared<Thin>();
      auto opt = make_opt(net->parameters());  // before wrapping
      nn::DataParallel dp(net, cpus(3), std::nullopt, options(64));
      if (fused) dp.register_fused_optim(opt);
      for (std::size_t s = 0; s < d.x.size(); ++s) {
        opt->zero_grad();
        dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
        if (!fused) opt->step();
      }
      out[fused] = trained_state(*net, *opt);
    }
    expect_bit_equal(out[1], out[0], name + ", built before wrapping, empty parameters");
  }
}

}  // namespace
}  // namespace lockstep::testing
