// The reducer path with the step on the calling thread (zero_grad, forward_backward,
// optimizer.step()): overlap on and off (each bucket's reduction started during backward or after
// it) give bit-identical parameters, .grad and optimizer state, with bf16 compression or not,
// with no_sync() accumulation before each reducing call, and no no_sync() call changes a
// parameter. A call in which a replica fails changes no parameter and no optimizer state: the
// caller skips that step, and training goes on as if the batch had never been seen.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>

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

// Two rounds of two no_sync() calls and a reducing one, checking that no_sync() calls do not
// change the parameters.
TrainedState train_no_sync(const Config& c, const MakeOpt& make_opt, const Data& d,
                           const std::string& what) {
  auto net = make_net();
  nn::DataParallel dp(net, cpus(c.devices), std::nullopt, options(c));
  auto opt = make_opt(dp.parameters());
  for (int round = 0; round < 2; ++round) {
    opt->zero_grad();
    Tensor w = net->fc1->weight.detach().clone();
    {
      auto guard = dp.no_sync();
      dp.forward_backward(d.x[0], d.y[0], nn::CrossEntropyLoss());
      dp.forward_backward(d.x[1], d.y[1], nn::CrossEntropyLoss());
    }
    EXPECT_TRUE(BitEqual(net->fc1->weight, w)) << what << ": a no_sync() call changed a weight";
    dp.forward_backward(d.x[2 + round], d.y[2 + round], nn::CrossEntropyLoss());
    opt->step();
  }
  return trained_state(*net, *opt);
}

TEST(CommOverlap, OnAndOffAreBitIdenticalCompressedOrNot) {
  // Three devices, 256-byte buckets (several), a parameter nobody uses, a frozen one, no_sync()
  // accumulation before each reducing call.
  const Data d = data();
  for (const auto& [name, make_opt] : optimizers())
    for (auto wire : {dist::WireFormat::Native, dist::WireFormat::BFloat16}) {
      const Config on{3, 256, true, false, wire}, off{3, 256, false, false, wire};
      const std::string what = name + ", " + off.str();
      expect_bit_equal(train_no_sync(on, make_opt, d, what), train_no_sync(off, make_opt, d, what),
                       what + ": overlap on/off");
    }
}

std::atomic<bool> g_fail{false};
std::atomic<int> g_calls{0};

TEST(ReducerPath, AFailingReplicaChangesNothingAndTrainingGoesOnAsWithoutThatBatch) {
  // The failure is thrown on cpu:1 by a gradient hook at the very end of its backward: every
  // gradient is final by then (with 256-byte buckets every bucket but the last has been reduced),
  // but the step failed, so forward_backward must leave no trace.
  const Data d = data();
  for (const auto& [name, make_opt] : optimizers())
    for (int n : {2, 3})
      for (std::int64_t cap : {std::int64_t{256}, std::int64_t{25 * 1024 * 1024}}) {
        const std::string what =
            name + ", " + std::to_string(n) + " devices, cap " + std::to_string(cap);
        const Config c{n, cap, true, false};
        TrainedState out[2];
        for (bool fail : {false, true}) {
          auto net = make_net();
          nn::DataParallel dp(net, cpus(n), std::nullopt, options(c));
          auto opt = make_opt(dp.parameters());
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
          opt->step();
          if (fail) {
            opt->zero_grad();
            TrainedState before = trained_state(*net, *opt);
            g_fail = true;
            g_calls = 0;
            expect_error<ShapeError>(
                [&] { dp.forward_backward(d.x[1], d.y[1], nn::CrossEntropyLoss()); },
                {"cpu:1", "injected failure"});
            g_fail = false;
            EXPECT_EQ(g_calls, 2) << what;
            TrainedState after = trained_state(*net, *opt);
            after.grads = before.grads;  // .grad after a failed call is not specified
            expect_bit_equal(after, before, what + ", the failed call");
          }
          for (std::size_t s = 2; s < d.x.size(); ++s) {
            opt->zero_grad();
            dp.forward_backward(d.x[s], d.y[s], nn::CrossEntropyLoss());
            opt->step();
          }
          out[fail] = trained_state(*net, *opt);
        }
        expect_bit_equal(out[1], out[0], what + ", after the failure");
      }
}

}  // namespace
}  // namespace lockstep::testing
