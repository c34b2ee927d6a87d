// DataParallel::register_fused_optim: forward_backward() with a registered optimizer must leave
// exactly (bit for bit) what forward_backward() followed by optimizer.step() leaves — parameters,
// .grad and optimizer state — for SGD (momentum, dampening, nesterov, weight decay), Adam and
// AdamW, on 1, 2, 3 and 5 devices, several-bucket and one-bucket layouts, overlap on and off,
// deterministic mode, frozen parameters, parameters that never get a gradient, LR scheduler
// changes, a held .grad, no_sync() and DistributedDataParallel, bf16 gradient compression; a
// failing replica updates nothing; optimizers that cannot run in slices and foreign parameters
// are refused. Overlap on and off (each bucket's reduction started during backward or after it)
// give bit-identical results, fused or not, compressed or not, with no_sync() accumulation.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "lockstep/parallel/distributed.h"
#include "support/helpers.h"
#include "support/tolerance.h"
#include "support/trained_state.h"

namespace lockstep::testing {
namespace {

// Linear(6, 16) - Tanh - Linear(16, 16) - Tanh - Linear(16, 3), plus `unused`, a Linear that
// forward never calls (its parameters never get a gradient).
struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::Linear> fc1, fc2, unused, fc3;
  Net() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 16));
    unused = register_module("unused", std::make_shared<nn::Linear>(16, 16));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override {
    return fc3->forward(tanh(fc2->forward(tanh(fc1->forward(x)))));
  }
};

// A fresh model with fixed values (seed 7); fc2's bias is frozen.
std::shared_ptr<Net> make_net() {
  manual_seed(7);
  auto net = std::make_shared<Net>();
  net->fc2->bias.requires_grad_(false);
  return net;
}

struct Config {
  int devices = 2;
  std::int64_t bucket_cap = 25 * 1024 * 1024;
  bool overlap = true;
  bool deterministic = false;
  dist::WireFormat compression = dist::WireFormat::Native;
  std::string str() const {
    return std::to_string(devices) + " devices, cap " + std::to_string(bucket_cap) + ", overlap " +
           std::to_string(overlap) + ", deterministic " + std::to_string(deterministic) +
           (compression == dist::WireFormat::BFloat16 ? ", bf16" : "");
  }
};

parallel::DataParallelOptions options(const Config& c) {
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  o.reducer.bucket_cap_bytes = c.bucket_cap;
  o.reducer.overlap = c.overlap;
  o.deterministic = c.deterministic;
  o.reducer.compression = c.compression;
  o.seed = 3;
  return o;
}

using MakeOpt = std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::vector<std::pair<std::string, MakeOpt>> optimizers() {
  auto sgd = [](optim::SGDOptions o) {
    return [o](std::vector<Tensor> p) { return std::make_shared<optim::SGD>(std::move(p), o); };
  };
  return {
      {"sgd", sgd({.lr = 0.1})},
      {"sgd momentum dampening wd",
       sgd({.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01})},
      {"sgd nesterov wd",
       sgd({.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true})},
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

// The batches of a run: sizes chosen uneven for every device count, one smaller than 5 devices.
struct Data {
  std::vector<Tensor> x, y;
};
Data data(std::vector<std::int64_t> sizes = {13, 11, 4, 9}) {
  manual_seed(11);
  Data d;
  for (auto n : sizes) {
    d.x.push_back(randn({n, 6}));
    d.y.push_back(randint(0, 3, {n}));
  }
  return d;
}

// Trains `steps` steps on `d`: zero_grad, forward_backward and, unfused, optimizer.step(); a
// StepLR (step 2, gamma 0.5) steps after every training step when `scheduler`.
TrainedState train(const Config& c, const MakeOpt& make_opt, bool fused, const Data& d,
                   bool scheduler = false, bool zero_grad = true) {
  auto net = make_net();
  nn::DataParallel dp(net, cpus(c.devices), std::nullopt, options(c));
  auto opt = make_opt(dp.parameters());
  std::unique_ptr<optim::StepLR> sched;
  if (scheduler) sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
  if (fused) dp.register_fused_optim(opt);
  for (std::size_t s = 0; s < d.x.size(); ++s) {
    if (zero_grad) opt->zero_grad();
    dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
    if (!fused) opt->step();
    if (sched) sched->step();
  }
  return trained_state(*net, *opt);
}

TEST(FusedOptim, BitIdenticalToStepAfterForwardBackward) {
  const Data d = data();
  std::vector<Config> configs;
  for (int n : {1, 2, 3, 5}) {
    for (std::int64_t cap : {std::int64_t{256}, std::int64_t{25 * 1024 * 1024}})
      for (bool overlap : {true, false}) configs.push_back({n, cap, overlap, false});
    configs.push_back({n, 256, true, true});
  }
  for (bool overlap : {true, false})
    configs.push_back({3, 256, overlap, false, dist::WireFormat::BFloat16});
  for (const auto& [name, make_opt] : optimizers())
    for (const Config& c : configs) {
      const std::string what = name + ", " + c.str();
      TrainedState unfused = train(c, make_opt, false, d);
      TrainedState fused = train(c, make_opt, true, d);
      expect_bit_equal(fused, unfused, what);
      // The unused parameters (indices 4, 5) never got a gradient or state; the frozen bias
      // (index 3) neither; so the state holds exactly the other 5 parameters (+ the lr).
      for (std::size_t i : {3, 4, 5}) {
        EXPECT_FALSE(fused.grads[i].defined()) << what;
        for (const auto& [key, value] : fused.state)
          EXPECT_NE(key.rfind("state." + std::to_string(i) + ".", 0), 0u) << what << " " << key;
      }
    }
}

TEST(FusedOptim, TheUpdateReallyHappensAndUnusedAndFrozenParametersStayPut) {
  const Data d = data();
  auto before = make_net();
  for (const auto& [name, make_opt] : optimizers()) {
    TrainedState r = train({2}, make_opt, true, d);
    auto p0 = before->parameters();
    EXPECT_FALSE(BitEqual(r.params[0], p0[0])) << name;  // fc1.weight moved
    EXPECT_TRUE(BitEqual(r.params[3], p0[3])) << name;   // frozen fc2.bias
    EXPECT_TRUE(BitEqual(r.params[4], p0[4])) << name;   // unused.weight
    EXPECT_TRUE(BitEqual(r.params[5], p0[5])) << name;   // unused.bias
  }
}

TEST(FusedOptim, LrSchedulerChangesBetweenStepsAreFollowed) {
  const Data d = data({13, 11, 4, 9, 12, 7});
  for (const auto& [name, make_opt] : optimizers())
    for (int n : {1, 2, 3})
      expect_bit_equal(train({n}, make_opt, true, d, true), train({n}, make_opt, false, d, true),
                       name + ", " + std::to_string(n) + " devices, StepLR");
}

TEST(FusedOptim, WithoutZeroGradTheHeldGradIsAccumulatedAsUnfused) {
  // No zero_grad(): every step adds into the .grad left by the previous one, and the step uses
  // the sum (forward_backward then steps on the calling thread).
  const Data d = data();
  for (const auto& [name, make_opt] : optimizers())
    expect_bit_equal(train({2}, make_opt, true, d, false, false),
                     train({2}, make_opt, false, d, false, false), name + ", no zero_grad");
}

TEST(FusedOptim, StateDictRoundTripResumesBitIdentically) {
  const Data d = data({13, 11, 4, 9, 12});
  for (const auto& [name, make_opt] : optimizers()) {
    TrainedState unfused = train({3}, make_opt, false, d);
    // 3 fused steps, save, then a new wrapper and optimizer load the state and do the rest.
    auto net = make_net();
    StateDict model_state, opt_state;
    {
      nn::DataParallel dp(net, cpus(3), std::nullopt, options({3}));
      auto opt = make_opt(dp.parameters());
      dp.register_fused_optim(opt);
      for (std::size_t s = 0; s < 3; ++s) {
        opt->zero_grad();
        dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
      }
      model_state = dp.state_dict();
      opt_state = opt->state_dict();
    }
    auto net2 = make_net();
    nn::DataParallel dp(net2, cpus(3), std::nullopt, options({3}));
    dp.load_state_dict(model_state);
    auto opt = make_opt(dp.parameters());
    opt->load_state_dict(opt_state);
    dp.register_fused_optim(opt);
    for (std::size_t s = 3; s < d.x.size(); ++s) {
      opt->zero_grad();
      dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
    }
    TrainedState resumed = trained_state(*net2, *opt);
    // .grad of the last step is compared too: both runs end with the same step.
    expect_bit_equal(resumed, unfused, name + ", resumed");
  }
}

// Two rounds of two no_sync() calls and a reducing one, checking that no_sync() calls do not
// step.
TrainedState train_no_sync(const Config& c, const MakeOpt& make_opt, bool fused, const Data& d,
                           const std::string& what) {
  auto net = make_net();
  nn::DataParallel dp(net, cpus(c.devices), std::nullopt, options(c));
  auto opt = make_opt(dp.parameters());
  if (fused) dp.register_fused_optim(opt);
  for (int round = 0; round < 2; ++round) {
    opt->zero_grad();
    Tensor w = net->fc1->weight.detach().clone();
    {
      auto guard = dp.no_sync();
      dp.forward_backward(d.x[0], d.y[0], nn::CrossEntropyLoss());
      dp.forward_backward(d.x[1], d.y[1], nn::CrossEntropyLoss());
    }
    EXPECT_TRUE(BitEqual(net->fc1->weight, w)) << what << ": a no_sync() call stepped";
    dp.forward_backward(d.x[2 + round], d.y[2 + round], nn::CrossEntropyLoss());
    if (!fused) opt->step();
  }
  return trained_state(*net, *opt);
}

TEST(FusedOptim, NoSyncCallsDoNotStepAndTheReducingCallDoes) {
  const Data d = data();
  for (const auto& [name, make_opt] : optimizers())
    expect_bit_equal(train_no_sync({2}, make_opt, true, d, name),
                     train_no_sync({2}, make_opt, false, d, name), name + ", no_sync");
}

TEST(CommOverlap, OnAndOffAreBitIdenticalFusedOrNotCompressedOrNot) {
  // Three devices, 256-byte buckets (several), a parameter nobody uses, a frozen one, no_sync()
  // accumulation before each reducing call.
  const Data d = data();
  const auto all = optimizers();
  const auto& [name, make_opt] = all[3];  // adam
  for (auto wire : {dist::WireFormat::Native, dist::WireFormat::BFloat16})
    for (bool fused : {false, true}) {
      const Config on{3, 256, true, false, wire}, off{3, 256, false, false, wire};
      const std::string what = name + ", " + off.str() + (fused ? ", fused" : "");
      expect_bit_equal(train_no_sync(on, make_opt, fused, d, what),
                       train_no_sync(off, make_opt, fused, d, what), what + ": overlap on/off");
    }
}

std::atomic<bool> g_fail{false};
std::atomic<int> g_calls{0};

TEST(FusedOptim, AFailingReplicaUpdatesNothingAndTheNextStepMatches) {
  // The failure is thrown on cpu:1 by a gradient hook at the very end of its backward: every
  // gradient is final by then (with 256-byte buckets every bucket but the last has been reduced),
  // but the step failed, so nothing may be updated.
  const Data d = data();
  for (const auto& [name, make_opt] : optimizers())
    for (int n : {2, 3})
      for (std::int64_t cap : {std::int64_t{256}, std::int64_t{25 * 1024 * 1024}}) {
        const std::string what =
            name + ", " + std::to_string(n) + " devices, cap " + std::to_string(cap);
        Config c{n, cap, true, false};
        TrainedState out[2];
        for (bool fused : {false, true}) {
          auto net = make_net();
          nn::DataParallel dp(net, cpus(n), std::nullopt, options(c));
          auto opt = make_opt(dp.parameters());
          if (fused) dp.register_fused_optim(opt);
          // Hooks on fc1's weight and bias of replica 1 (the last bucket's parameters, whose
          // gradients backward produces last): the second to run throws, after the reducer's own
          // hooks have seen both gradients.
          for (std::size_t i : {0, 1})
            dp.replica(1)->parameters()[i].register_post_accumulate_grad_hook([](Tensor&) {
              if (g_fail && ++g_calls == 2) throw ShapeError("injected failure");
            });
          // One good step first, so the optimizer has state to keep.
          opt->zero_grad();
          dp.forward_backward(d.x[0], d.y[0], nn::CrossEntropyLoss());
          if (!fused) opt->step();
          TrainedState before = trained_state(*net, *opt);
          opt->zero_grad();
          g_fail = true;
          g_calls = 0;
          expect_error<ShapeError>(
              [&] { dp.forward_backward(d.x[1], d.y[1], nn::CrossEntropyLoss()); },
              {"cpu:1", "injected failure"});
          g_fail = false;
          EXPECT_EQ(g_calls, 2) << what;
          TrainedState after = trained_state(*net, *opt);
          for (std::size_t i = 0; i < before.params.size(); ++i)
            EXPECT_TRUE(BitEqual(after.params[i], before.params[i])) << what << ": parameter " << i;
          ASSERT_EQ(after.state.size(), before.state.size()) << what;
          for (const auto& [key, value] : before.state)
            EXPECT_TRUE(BitEqual(value, *after.state.find(key))) << what << ": state " << key;
          // The failed step is simply skipped; training goes on.
          for (std::size_t s = 2; s < d.x.size(); ++s) {
            opt->zero_grad();
            dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
            if (!fused) opt->step();
          }
          out[fused] = trained_state(*net, *opt);
        }
        expect_bit_equal(out[1], out[0], what + ", after the failure");
      }
}

TEST(FusedOptim, DistributedDataParallelStepsOnTheCallingThreadBitIdentically) {
  const Data d = data();
  for (const auto& [name, make_opt] : optimizers()) {
    std::vector<TrainedState> out[2];
    for (bool fused : {false, true}) {
      out[fused].resize(2);
      // Built here: make_net() seeds the process-wide generator, which the rank threads share.
      std::vector<std::shared_ptr<Net>> nets{make_net(), make_net()};
      run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
        auto net = nets[static_cast<std::size_t>(rank)];
        parallel::DistributedDataParallelOptions o;
        o.device_ids = cpus(2);
        o.threads_per_device = 1;
        parallel::DistributedDataParallel ddp(net, group, o);
        auto opt = make_opt(ddp.parameters());
        if (fused) ddp.register_fused_optim(opt);
        for (std::size_t s = 0; s < d.x.size(); ++s) {
          opt->zero_grad();
          const std::int64_t half = d.x[s].size(0) / 2;
          const std::int64_t start = rank == 0 ? 0 : half;
          const std::int64_t size = rank == 0 ? half : d.x[s].size(0) - half;
          ddp.forward_backward(d.x[s].narrow(0, start, size), d.y[s].narrow(0, start, size),
                               nn::CrossEntropyLoss());
          if (!fused) opt->step();
        }
        out[fused][static_cast<std::size_t>(rank)] = trained_state(*net, *opt);
      });
    }
    for (int r = 0; r < 2; ++r)
      expect_bit_equal(out[1][static_cast<std::size_t>(r)], out[0][static_cast<std::size_t>(r)],
                       name + ", rank " + std::to_string(r));
  }
}

TEST(FusedOptim, TheGatherPathIgnoresTheFusedOptimizer) {
  auto net = make_net();
  nn::DataParallel dp(net, cpus(2), std::nullopt, options({2}));
  auto opt = std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  dp.register_fused_optim(opt);
  const Data d = data();
  Tensor w = net->fc1->weight.detach().clone();
  nn::CrossEntropyLoss()(dp.forward(d.x[0]), d.y[0]).backward();
  EXPECT_TRUE(BitEqual(net->fc1->weight, w));
  EXPECT_TRUE(net->fc1->weight.grad().defined());
}

// An optimizer whose step is not elementwise (it scales by the global gradient norm).
struct NormalizedSGD : optim::Optimizer {
  explicit NormalizedSGD(std::vector<Tensor> p) : Optimizer(std::move(p)) { set_lr(0.1); }
  void step() override {
    NoGradGuard no_grad;
    double sq = 0;
    for (auto& p : params_)
      if (p.grad().defined()) sq += sum(mul(p.grad(), p.grad())).item();
    for (auto& p : params_)
      if (p.grad().defined()) p.add_(p.grad(), -lr_ / std::sqrt(sq + 1e-12));
  }

 protected:
  std::vector<std::string> state_names() const override { return {}; }
};

TEST(FusedOptim, RefusesNonElementwiseForeignAndDuplicateParameters) {
  auto net = make_net();
  nn::DataParallel dp(net, cpus(2), std::nullopt, options({2}));
  expect_error<ValueError>(
      [&] { dp.register_fused_optim(std::make_shared<NormalizedSGD>(dp.parameters())); },
      {"register_fused_optim", "not elementwise"});
  Tensor foreign = zeros({3}).requires_grad_(true);
  expect_error<ValueError>(
      [&] {
        dp.register_fused_optim(std::make_shared<optim::SGD>(
            std::vector<Tensor>{dp.parameters()[0], foreign}, optim::SGDOptions{}));
      },
      {"optimizer parameter 1", "not a parameter of the wrapped module"});
  // A parameter of a replica is not a wrapped (master) parameter either.
  expect_error<ValueError>(
      [&] {
        dp.register_fused_optim(
            std::make_shared<optim::SGD>(dp.replica(1)->parameters(), optim::SGDOptions{}));
      },
      {"optimizer parameter 0", "not a parameter of the wrapped module"});
  expect_error<ValueError>(
      [&] {
        dp.register_fused_optim(std::make_shared<optim::SGD>(
            std::vector<Tensor>{dp.parameters()[0], dp.parameters()[2], dp.parameters()[0]},
            optim::SGDOptions{}));
      },
      {"parameters 0 and 2", "same tensor"});
  EXPECT_EQ(dp.fused_optim(), nullptr);  // nothing registered by the refused calls

  // A subset is fine: only those parameters are updated.
  auto subset = std::make_shared<optim::SGD>(std::vector<Tensor>{net->fc3->weight, net->fc3->bias},
                                             optim::SGDOptions{.lr = 0.1});
  dp.register_fused_optim(subset);
  EXPECT_EQ(dp.fused_optim(), subset);
  Tensor w1 = net->fc1->weight.detach().clone(), w3 = net->fc3->weight.detach().clone();
  const Data d = data();
  dp.forward_backward(d.x[0], d.y[0], nn::CrossEntropyLoss());
  EXPECT_TRUE(BitEqual(net->fc1->weight, w1));
  EXPECT_FALSE(BitEqual(net->fc3->weight, w3));
  // nullptr unregisters: the next call leaves the parameters alone.
  dp.register_fused_optim(nullptr);
  EXPECT_EQ(dp.fused_optim(), nullptr);
  subset->zero_grad();
  w3 = net->fc3->weight.detach().clone();
  dp.forward_backward(d.x[1], d.y[1], nn::CrossEntropyLoss());
  EXPECT_TRUE(BitEqual(net->fc3->weight, w3));
}

}  // namespace
}  // namespace lockstep::testing
