// Differential tests of DataParallel against the plain model: scripts of reducer steps, gather
// steps, optimizer steps and zero_grad variants (no zero_grad, zero_grad(false),
// Module::zero_grad, no_sync) on 1-5 devices, several bucket caps, overlap on and off, float64,
// batches smaller than the device count, frozen, partly used and shared parameters, a failing
// replica, load_state_dict between steps and a destroyed wrapper; every gradient and weight is
// compared with the plain model after every action. Written as adversarial probes of the reducer
// rework (gradient destinations, reduce to replica 0, CPU replicas aliasing the master).
#include <gtest/gtest.h>

#include <atomic>
#include <functional>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

parallel::DataParallelOptions bopts(std::int64_t cap = 25 << 20, bool overlap = true) {
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  o.reducer.bucket_cap_bytes = cap;
  o.reducer.overlap = overlap;
  return o;
}

double rt(DType d) { return d == kFloat64 ? 1e-9 : 1e-4; }
double at(DType d) { return d == kFloat64 ? 1e-11 : 1e-5; }

::testing::AssertionResult SameGrads(nn::Module& ref, nn::Module& got) {
  auto a = ref.parameters(), b = got.parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    Tensor ga = a[i].grad(), gb = b[i].grad();
    if (ga.defined() != gb.defined())
      return ::testing::AssertionFailure()
             << "param " << i << " grad defined: ref " << ga.defined() << " dp " << gb.defined();
    if (!ga.defined()) continue;
    auto r = AllClose(gb, ga, rt(ga.dtype()), at(ga.dtype()));
    if (!r) return ::testing::AssertionFailure() << "param " << i << " grad: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameWeights(nn::Module& ref, nn::Module& got) {
  auto a = ref.parameters(), b = got.parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto r = AllClose(b[i], a[i], rt(a[i].dtype()), at(a[i].dtype()));
    if (!r) return ::testing::AssertionFailure() << "param " << i << " value: " << r.message();
  }
  return ::testing::AssertionSuccess();
}

std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(8, 3)});
}

// Runs `script` on the plain model and the DataParallel-wrapped clone; compares after each action.
// R reducer step, G gather step, S optimizer step, Z zero_grad(true), z zero_grad(false),
// M Module::zero_grad, N a no_sync reducer call.
void run_script(std::shared_ptr<nn::Module> base, const std::string& script, int n,
                parallel::DataParallelOptions o, DType dtype, std::int64_t batch,
                const std::string& tag, double momentum = 0.9) {
  auto ref = base->clone();
  auto model = base->clone();
  nn::DataParallel dp(model, cpus(n), std::nullopt, o);
  optim::SGD ropt(ref->parameters(), {.lr = 0.1, .momentum = momentum, .weight_decay = 0.01});
  optim::SGD dopt(dp.parameters(), {.lr = 0.1, .momentum = momentum, .weight_decay = 0.01});
  nn::CrossEntropyLoss ce;
  for (std::size_t i = 0; i < script.size(); ++i) {
    char c = script[i];
    manual_seed(100 + static_cast<std::uint64_t>(i));
    Tensor x = randn({batch, 6}).to(dtype);
    Tensor y = randint(0, 3, {batch});
    if (c == 'R' || c == 'G' || c == 'N') {
      ce(ref->forward(x), y).backward();
      if (c == 'R') dp.forward_backward(x, y, ce);
      if (c == 'N') {
        auto g = dp.no_sync();
        dp.forward_backward(x, y, ce);
      }
      if (c == 'G') ce(dp.forward(x), y).backward();
    } else if (c == 'S') {
      ropt.step();
      dopt.step();
    } else if (c == 'Z') {
      ropt.zero_grad(true);
      dopt.zero_grad(true);
    } else if (c == 'z') {
      ropt.zero_grad(false);
      dopt.zero_grad(false);
    } else if (c == 'M') {
      ref->zero_grad();
      model->zero_grad();
    }
    if (c != 'N') EXPECT_TRUE(SameGrads(*ref, *model)) << tag << " after action " << i << " '" << c << "'";
    EXPECT_TRUE(SameWeights(*ref, *model)) << tag << " after action " << i << " '" << c << "'";
  }
}

const char* kScript = "RRRSGRGRSZRSzRRSMGRRSZRGS";

TEST(DataParallelVsPlainAccumulate, MixedPathsNoZeroGradAllDeviceCountsAndBuckets) {
  manual_seed(1);
  auto base = mlp();
  for (int n : {1, 2, 3, 5})
    for (auto [cap, ov] : std::vector<std::pair<std::int64_t, bool>>{
             {25 << 20, true}, {64, true}, {64, false}, {1, true}, {1, false}})
      run_script(base, kScript, n, bopts(cap, ov), kFloat32, 7,
                 "n=" + std::to_string(n) + " cap=" + std::to_string(cap) + " ov=" + std::to_string(ov));
}

TEST(DataParallelVsPlainAccumulate, Float64) {
  manual_seed(2);
  auto base = mlp();
  base->to(kFloat64);
  for (int n : {2, 3})
    for (std::int64_t cap : {std::int64_t(25 << 20), std::int64_t(1)})
      run_script(base, kScript, n, bopts(cap, true), kFloat64, 9, "f64 n=" + std::to_string(n));
}

TEST(DataParallelVsPlainAccumulate, BatchSmallerThanDevices) {
  manual_seed(3);
  auto base = mlp();
  for (std::int64_t b : {1, 2})
    run_script(base, kScript, 5, bopts(64, true), kFloat32, b, "batch=" + std::to_string(b));
}

TEST(DataParallelVsPlainFrozen, FrozenFirstWeight) {
  manual_seed(4);
  auto base = mlp();
  base->parameters()[0].requires_grad_(false);
  for (int n : {1, 2, 3})
    for (std::int64_t cap : {std::int64_t(25 << 20), std::int64_t(1)})
      run_script(base, kScript, n, bopts(cap, true), kFloat32, 6, "frozen n=" + std::to_string(n));
}

TEST(DataParallelVsPlainNoSync, NoSyncThenSynced) {
  manual_seed(5);
  auto base = mlp();
  for (int n : {1, 2, 3})
    for (auto [cap, ov] : std::vector<std::pair<std::int64_t, bool>>{{25 << 20, true}, {1, true}, {1, false}})
      run_script(base, "NRSZNNRSRNRGS", n, bopts(cap, ov), kFloat32, 6, "nosync n=" + std::to_string(n));
}

// Uses `extra` only when g_use_extra is set; `branch` only for chunks whose x[:,0] sums > 0.
std::atomic<bool> g_use_extra{false};
struct Skippy : nn::Cloneable<Skippy> {
  std::shared_ptr<nn::Linear> a, b, extra, branch;
  Skippy() { reset(); }
  void reset() override {
    a = register_module("a", std::make_shared<nn::Linear>(6, 6));
    extra = register_module("extra", std::make_shared<nn::Linear>(6, 6));
    branch = register_module("branch", std::make_shared<nn::Linear>(6, 6));
    b = register_module("b", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = tanh(a->forward(x));
    if (g_use_extra) h = tanh(extra->forward(h));
    if (x.narrow(1, 0, 1).sum().item() > 0) h = tanh(branch->forward(h));
    return b->forward(h);
  }
};

// Reference: per-chunk plain losses weighted by chunk size (chunks of batch/n rows).
TEST(DataParallelVsPlainSkip, ParamUsedBySomeReplicasOrSomeSteps) {
  manual_seed(6);
  auto base = std::make_shared<Skippy>();
  nn::CrossEntropyLoss ce;
  for (int n : {2, 3})
    for (auto [cap, ov] : std::vector<std::pair<std::int64_t, bool>>{{25 << 20, true}, {1, true}, {1, false}}) {
      auto ref = base->clone();
      auto model = base->clone();
      nn::DataParallel dp(model, cpus(n), std::nullopt, bopts(cap, ov));
      const std::int64_t per = 2, B = per * n;
      std::string tag = "n=" + std::to_string(n) + " cap=" + std::to_string(cap) + " ov=" + std::to_string(ov);
      for (int step = 0; step < 6; ++step) {
        g_use_extra = step % 3 == 1;
        Tensor x = randn({B, 6});
        // chunk k positive in column 0 iff (k + step) even
        {
          NoGradGuard ng;
          for (int k = 0; k < n; ++k) {
            Tensor c = x.narrow(0, k * per, per).narrow(1, 0, 1);
            c.copy_(full({per, 1}, ((k + step) % 2 == 0) ? 1.0 : -1.0));
          }
        }
        Tensor y = randint(0, 3, {B});
        for (int k = 0; k < n; ++k)
          mul(ce(ref->forward(x.narrow(0, k * per, per)), y.narrow(0, k * per, per)), 1.0 / n).backward();
        if (step % 2 == 0)
          dp.forward_backward(x, y, ce);
        else {
          Tensor out = dp.forward(x);
          ce(out, y).backward();
        }
        EXPECT_TRUE(SameGrads(*ref, *model)) << tag << " step " << step;
        if (step == 3) {
          ref->zero_grad();
          model->zero_grad();
        }
      }
    }
  g_use_extra = false;
}

// The same Linear twice in one forward, plus a direct penalty on its weight.
struct Twice : nn::Cloneable<Twice> {
  std::shared_ptr<nn::Linear> fc, out;
  Twice() { reset(); }
  void reset() override {
    fc = register_module("fc", std::make_shared<nn::Linear>(6, 6));
    out = register_module("out", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = tanh(fc->forward(tanh(fc->forward(x))));
    Tensor pen = mul(sum(mul(fc->weight, fc->weight)), 0.05);
    return add(out->forward(h), pen);
  }
};

TEST(DataParallelVsPlainShare, SameLinearTwiceAndPenalty) {
  manual_seed(7);
  auto base = std::make_shared<Twice>();
  for (int n : {1, 2, 3})
    for (std::int64_t cap : {std::int64_t(25 << 20), std::int64_t(1)})
      run_script(base, kScript, n, bopts(cap, true), kFloat32, 6, "twice n=" + std::to_string(n));
}

TEST(DataParallelVsPlainShare, SameModuleRegisteredTwiceInSequential) {
  manual_seed(8);
  auto lin = std::make_shared<nn::Linear>(6, 6);
  auto base = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      lin, std::make_shared<nn::Tanh>(), lin, std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(6, 3)});
  // The reference shares its Linear the same way; built from copies of the values (wrapping
  // moves the wrapped model's parameters into the flat buffer). Plain SGD steps by hand.
  nn::CrossEntropyLoss ce;
  auto model = base;
  auto rlin = std::make_shared<nn::Linear>(6, 6);
  auto rlast = std::make_shared<nn::Linear>(6, 3);
  {
    NoGradGuard ng;
    rlin->weight.copy_(lin->weight);
    rlin->bias.copy_(lin->bias);
    auto last = std::static_pointer_cast<nn::Linear>(base->children()[4]);
    rlast->weight.copy_(last->weight);
    rlast->bias.copy_(last->bias);
  }
  auto ref = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      rlin, std::make_shared<nn::Tanh>(), rlin, std::make_shared<nn::Tanh>(), rlast});
  nn::DataParallel dp(model, cpus(2), std::nullopt, bopts());
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({6, 6});
    Tensor y = randint(0, 3, {6});
    ce(ref->forward(x), y).backward();
    if (step == 1)
      ce(dp.forward(x), y).backward();
    else
      dp.forward_backward(x, y, ce);
    EXPECT_TRUE(AllClose(lin->weight.grad(), rlin->weight.grad(), 1e-4, 1e-5)) << "step " << step;
    EXPECT_TRUE(AllClose(lin->weight, rlin->weight)) << "step " << step;
    NoGradGuard ng;
    lin->weight.add_(mul(lin->weight.grad(), -0.1));
    rlin->weight.add_(mul(rlin->weight.grad(), -0.1));
    lin->weight.set_grad(Tensor());
    rlin->weight.set_grad(Tensor());
    for (auto& p : model->parameters()) p.set_grad(Tensor());
    for (auto& p : ref->parameters()) p.set_grad(Tensor());
  }
}

// Throws a ShapeError in the replica on cpu:1 while g_fail is set.
std::atomic<bool> g_fail{false};
struct Faulty2 : nn::Cloneable<Faulty2> {
  std::shared_ptr<nn::Linear> fc, out;
  Faulty2() { reset(); }
  void reset() override {
    fc = register_module("fc", std::make_shared<nn::Linear>(6, 6));
    out = register_module("out", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = tanh(fc->forward(x));
    if (g_fail && x.device().index == 1) throw ShapeError("boom");
    return out->forward(h);
  }
};

TEST(DataParallelVsPlainError, ReplicaErrorThenNormalSteps) {
  manual_seed(10);
  auto base = std::make_shared<Faulty2>();
  nn::CrossEntropyLoss ce;
  for (bool zero_between : {false, true})
    for (std::int64_t cap : {std::int64_t(25 << 20), std::int64_t(1)}) {
      auto ref = base->clone();
      auto model = base->clone();
      nn::DataParallel dp(model, cpus(3), std::nullopt, bopts(cap, true));
      for (int step = 0; step < 5; ++step) {
        Tensor x = randn({6, 6});
        Tensor y = randint(0, 3, {6});
        if (step == 1 || step == 3) {
          g_fail = true;
          EXPECT_THROW(dp.forward_backward(x, y, ce), ShapeError);
          EXPECT_THROW(dp.forward(x), ShapeError);
          g_fail = false;
        } else {
          ce(ref->forward(x), y).backward();
          dp.forward_backward(x, y, ce);
        }
        EXPECT_TRUE(SameGrads(*ref, *model)) << "zb=" << zero_between << " cap=" << cap << " step " << step;
        if (zero_between && step == 2) {
          ref->zero_grad();
          model->zero_grad();
        }
      }
    }
}

TEST(DataParallelVsPlainState, LoadStateDictBetweenSteps) {
  manual_seed(12);
  auto base = mlp();
  auto other = mlp();
  auto ref = base->clone();
  auto model = base->clone();
  nn::DataParallel dp(model, cpus(3), std::nullopt, bopts(64, true));
  nn::CrossEntropyLoss ce;
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn({6, 6}), y = randint(0, 3, {6});
    ce(ref->forward(x), y).backward();
    if (step % 2) ce(dp.forward(x), y).backward(); else dp.forward_backward(x, y, ce);
    EXPECT_TRUE(SameGrads(*ref, *model)) << step;
    if (step == 1) {
      ref->load_state_dict(other->state_dict());
      StateDict sd;
      for (auto& [k, v] : other->state_dict()) sd.insert("module." + k, v);
      dp.load_state_dict(sd);
      EXPECT_TRUE(SameWeights(*ref, *model));
    }
  }
}

TEST(DataParallelVsPlainLifetime, DestroyWrapperThenTrainPlain) {
  manual_seed(13);
  auto base = mlp();
  auto ref = base->clone();
  auto model = base->clone();
  optim::SGD ropt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD mopt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::CrossEntropyLoss ce;
  {
    nn::DataParallel dp(model, cpus(3), std::nullopt, bopts(1, true));
    for (int step = 0; step < 2; ++step) {
      Tensor x = randn({6, 6}), y = randint(0, 3, {6});
      ce(ref->forward(x), y).backward();
      dp.forward_backward(x, y, ce);
      ropt.step();
      mopt.step();
    }
  }
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({6, 6}), y = randint(0, 3, {6});
    ce(ref->forward(x), y).backward();
    ce(model->forward(x), y).backward();
    EXPECT_TRUE(SameGrads(*ref, *model)) << step;
    ropt.step();
    mopt.step();
    EXPECT_TRUE(SameWeights(*ref, *model)) << step;
    if (step == 1) {
      ropt.zero_grad();
      mopt.zero_grad();
    }
  }
  // rewrap the same module again and keep going
  nn::DataParallel dp2(model, cpus(2), std::nullopt, bopts());
  Tensor x = randn({6, 6}), y = randint(0, 3, {6});
  ce(ref->forward(x), y).backward();
  dp2.forward_backward(x, y, ce);
  EXPECT_TRUE(SameGrads(*ref, *model));
}

}  // namespace
}  // namespace lockstep::testing
