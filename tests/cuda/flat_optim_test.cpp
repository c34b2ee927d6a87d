// The flat optimizer step on a GPU: when an optimizer's parameters lie flat on cuda:0 (views of
// one buffer, gradients views of another, as DataParallel lays them out) step() is ONE launch
// over all of them, and its result is bit-identical to the per-parameter launches (the same
// optimizer over the same values in separate tensors): parameters and every state_dict entry,
// for SGD (momentum, dampening, nesterov, weight decay), Adam and AdamW (Lockstep has no amsgrad),
// float32 and float64, with parameters missing their gradient at some steps (skipped, no state,
// no Adam step counted). Also: load_state_dict then flat steps, flat and per-parameter steps
// alternating, and DataParallel on cuda:0 taking the flat path. Needs a GPU (each test skips
// with the reason otherwise); the planner's layout rules are tested without one in
// tests/optim/flat_step_test.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "lockstep/lockstep.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);

using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

std::vector<std::pair<std::string, Make>> optimizer_cases() {
  std::vector<std::pair<std::string, Make>> cases;
  const std::vector<std::pair<std::string, optim::SGDOptions>> sgd = {
      {"sgd plain", {.lr = 0.1}},
      {"sgd weight_decay", {.lr = 0.05, .weight_decay = 0.01}},
      {"sgd momentum", {.lr = 0.1, .momentum = 0.9}},
      {"sgd dampening", {.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 1e-3}},
      {"sgd nesterov", {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true}},
  };
  for (const auto& [name, o] : sgd)
    cases.push_back({name, [o = o](std::vector<Tensor> p) {
                       return std::make_unique<optim::SGD>(std::move(p), o);
                     }});
  for (double wd : {0.0, 0.05}) {
    const optim::AdamOptions o{.lr = 0.01, .weight_decay = wd};
    cases.push_back({"adam wd=" + std::to_string(wd), [o](std::vector<Tensor> p) {
                       return std::make_unique<optim::Adam>(std::move(p), o);
                     }});
    const optim::AdamWOptions w{.lr = 0.01, .weight_decay = wd};
    cases.push_back({"adamw wd=" + std::to_string(wd), [w](std::vector<Tensor> p) {
                       return std::make_unique<optim::AdamW>(std::move(p), w);
                     }});
  }
  return cases;
}

// Parameter shapes: 2-d, empty, one over two blocks of a flat launch (4096 elements each),
// size 1, one that never gets a gradient.
const std::vector<Shape> kShapes = {Shape{7, 5}, Shape{0}, Shape{4100}, Shape{1}, Shape{3, 2}};
// Whether parameter i has a gradient at step t: parameter 2 misses step 1, parameter 3 gets its
// first gradient at step 2, parameter 4 never has one; the empty parameter 1 always has one.
bool has_grad(std::size_t t, std::size_t i) {
  if (i == 4) return false;
  if (i == 2) return t != 1;
  if (i == 3) return t >= 2;
  return true;
}
constexpr std::size_t kSteps = 5;

// The same values twice on cuda:0: `flat` as views of one buffer (FlatBuffer, DataParallel's
// layout) with gradients as views of one gradient buffer; `separate` as tensors of their own.
struct Twins {
  parallel::FlatBuffer flat;
  Tensor flat_grad;
  std::vector<Tensor> separate;
};

Twins make_twins(DType dtype, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> a, b;
  for (const Shape& s : kShapes) {
    Tensor v = randn(s, {}, &gen).to(dtype);
    a.push_back(v.to(kCuda0).requires_grad_());
    b.push_back(v.to(kCuda0).requires_grad_());
  }
  Twins t;
  t.flat = parallel::FlatBuffer::build(a, kCuda0);
  t.flat_grad = zeros({t.flat.numel}, TensorOptions(dtype).device(kCuda0));
  t.separate = b;
  return t;
}

// Gradients of step t: the same values as views of twins.flat_grad and as tensors of their own.
void set_grads(Twins& t, std::size_t step, std::uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed * 100 + step);
  t.flat_grad.copy_(randn({t.flat.numel}, {}, &gen).to(t.flat_grad.dtype()).to(kCuda0));
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    Tensor view = t.flat.view_of(t.flat_grad, i);
    t.flat.params[i].set_grad(has_grad(step, i) ? view : Tensor());
    t.separate[i].set_grad(has_grad(step, i) ? view.clone() : Tensor());
  }
}

std::int64_t launches_expected(std::size_t step) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < kShapes.size(); ++i)
    n += has_grad(step, i) && kShapes[i].numel() > 0 ? 1 : 0;
  return n;
}

void expect_same(const std::vector<Tensor>& a, const optim::Optimizer& oa,
                 const std::vector<Tensor>& b, const optim::Optimizer& ob,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(BitEqual(a[i].detach(), b[i].detach())) << what << ": parameter " << i;
  const StateDict sa = oa.state_dict(), sb = ob.state_dict();
  ASSERT_EQ(sa.size(), sb.size()) << what;
  for (const auto& [key, value] : sa) {
    const Tensor* other = sb.find(key);
    ASSERT_NE(other, nullptr) << what << ": state " << key;
    EXPECT_EQ(value.device(), cpu()) << what << ": state " << key;
    EXPECT_TRUE(BitEqual(value, *other)) << what << ": state " << key;
  }
}

TEST(CudaFlatOptim, OneLaunchBitIdenticalToPerParameterLaunches) {
  LOCKSTEP_REQUIRE_CUDA();
  for (DType dtype : {kFloat32, kFloat64})
    for (const auto& [name, make] : optimizer_cases()) {
      const std::string what = name + " " + to_string(dtype);
      Twins t = make_twins(dtype, 5);
      const Tensor initial4 = t.flat.params[4].detach().clone();
      auto flat = make(t.flat.params), separate = make(t.separate);
      for (std::size_t step = 0; step < kSteps; ++step) {
        set_grads(t, step, 9);
        flat->step();
        separate->step();
        EXPECT_TRUE(flat->last_cuda_step().flat)
            << what << " step " << step << ": " << flat->last_cuda_step().fallback_reason;
        EXPECT_EQ(flat->last_cuda_step().launches, 1) << what << " step " << step;
        EXPECT_FALSE(separate->last_cuda_step().flat) << what;
        EXPECT_NE(separate->last_cuda_step().fallback_reason.find("different storages"),
                  std::string::npos)
            << separate->last_cuda_step().fallback_reason;
        EXPECT_EQ(separate->last_cuda_step().launches, launches_expected(step)) << what;
        expect_same(t.flat.params, *flat, t.separate, *separate,
                    what + " step " + std::to_string(step));
      }
      // The has-gradient rule: parameter 4 never had a gradient (untouched, no state); the
      // state of the others is one flat buffer on the device, a view per parameter.
      EXPECT_TRUE(BitEqual(t.flat.params[4].detach(), initial4)) << what;
      for (const char* n : {"momentum_buffer", "exp_avg", "exp_avg_sq"}) {
        EXPECT_FALSE(flat->state(4, n).defined()) << what << " " << n;
        const Tensor s0 = flat->state(0, n), s2 = flat->state(2, n);
        if (!s0.defined()) continue;
        EXPECT_EQ(s0.device(), kCuda0) << what;
        ASSERT_TRUE(s2.defined()) << what << " " << n;
        EXPECT_EQ(s0.impl().storage, s2.impl().storage) << what << " " << n;
      }
    }
}

TEST(CudaFlatOptim, AdamStepCountsArePerParameter) {
  LOCKSTEP_REQUIRE_CUDA();
  Twins t = make_twins(kFloat32, 6);
  optim::Adam flat(t.flat.params, {.lr = 0.01});
  for (std::size_t step = 0; step < kSteps; ++step) {
    set_grads(t, step, 10);
    flat.step();
  }
  EXPECT_EQ(flat.state(0, "step").item(), double(kSteps));
  EXPECT_EQ(flat.state(1, "step").item(), double(kSteps));
  EXPECT_EQ(flat.state(2, "step").item(), double(kSteps - 1));
  EXPECT_EQ(flat.state(3, "step").item(), double(kSteps - 2));
  EXPECT_FALSE(flat.state(4, "step").defined());
}

// A step in which no parameter has a gradient launches nothing and creates no state.
TEST(CudaFlatOptim, NoGradientNoLaunchNoState) {
  LOCKSTEP_REQUIRE_CUDA();
  Twins t = make_twins(kFloat32, 7);
  optim::SGD sgd(t.flat.params, {.lr = 0.1, .momentum = 0.9});
  sgd.step();
  EXPECT_TRUE(sgd.last_cuda_step().flat);
  EXPECT_EQ(sgd.last_cuda_step().launches, 0);
  EXPECT_TRUE(sgd.state_dict().size() == 1);  // param_groups.0.lr only
}

// load_state_dict restores state as tensors of their own; the next flat step moves them into the
// flat state buffers and continues bit-identically to an uninterrupted run.
TEST(CudaFlatOptim, LoadStateDictThenFlatSteps) {
  LOCKSTEP_REQUIRE_CUDA();
  for (const auto& [name, make] : optimizer_cases()) {
    Twins a = make_twins(kFloat32, 8), b = make_twins(kFloat32, 8);
    auto whole = make(a.flat.params), first = make(b.flat.params);
    for (std::size_t step = 0; step < 3; ++step) {
      set_grads(a, step, 11);
      whole->step();
      set_grads(b, step, 11);
      first->step();
    }
    auto resumed = make(b.flat.params);
    resumed->load_state_dict(first->state_dict());
    for (std::size_t step = 3; step < kSteps; ++step) {
      set_grads(a, step, 11);
      whole->step();
      set_grads(b, step, 11);
      resumed->step();
      EXPECT_TRUE(resumed->last_cuda_step().flat) << name;
    }
    expect_same(a.flat.params, *whole, b.flat.params, *resumed, name + " resumed");
  }
}

// Steps whose gradients are not flat (tensors of their own) fall back to per-parameter launches,
// creating state of their own; a later flat step moves it into the flat buffers. Same bits as
// per-parameter launches throughout.
TEST(CudaFlatOptim, FlatAndPerParameterStepsAlternate) {
  LOCKSTEP_REQUIRE_CUDA();
  for (const auto& [name, make] : optimizer_cases()) {
    Twins t = make_twins(kFloat64, 12);
    auto mixed = make(t.flat.params), separate = make(t.separate);
    for (std::size_t step = 0; step < kSteps; ++step) {
      set_grads(t, step, 13);
      const bool flat_step = step % 2 == 1;
      if (!flat_step)  // gradients of their own: not one storage
        for (std::size_t i = 0; i < kShapes.size(); ++i)
          if (t.flat.params[i].grad().defined())
            t.flat.params[i].set_grad(t.flat.params[i].grad().clone());
      mixed->step();
      separate->step();
      EXPECT_EQ(mixed->last_cuda_step().flat, flat_step)
          << name << " step " << step << ": " << mixed->last_cuda_step().fallback_reason;
      expect_same(t.flat.params, *mixed, t.separate, *separate,
                  name + " step " + std::to_string(step));
    }
  }
}

// DataParallel on cuda:0: the master parameters are views of the flat buffer and their .grad
// views of the reduced gradient buffer, so step() is one launch, after forward_backward and after
// the gather path's backward alike.
TEST(CudaFlatOptim, DataParallelOnCuda0TakesTheFlatPath) {
  LOCKSTEP_REQUIRE_CUDA();
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, 4), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4, 3)});
  nn::DataParallel dp(model, {kCuda0});
  auto sgd =
      std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  optim::Adam adam(dp.parameters(), {.lr = 0.01});
  Tensor x = randn({9, 5}), y = randint(0, 3, {9});
  nn::CrossEntropyLoss criterion;
  for (int step = 0; step < 2; ++step) {
    sgd->zero_grad();
    (void)dp.forward_backward(x, y, criterion);
    sgd->step();
    EXPECT_TRUE(sgd->last_cuda_step().flat) << sgd->last_cuda_step().fallback_reason;
    EXPECT_EQ(sgd->last_cuda_step().launches, 1);
    adam.step();
    EXPECT_TRUE(adam.last_cuda_step().flat) << adam.last_cuda_step().fallback_reason;
    EXPECT_EQ(adam.last_cuda_step().launches, 1);
  }
  // The gather path's gradients are views of the same buffer.
  sgd->zero_grad();
  Tensor loss = criterion(dp.forward(x), y.to(kCuda0));
  loss.backward();
  sgd->step();
  EXPECT_TRUE(sgd->last_cuda_step().flat) << sgd->last_cuda_step().fallback_reason;
}

// Parameters of their own (the golden runs on cuda:0) take the per-parameter path and say why.
TEST(CudaFlatOptim, SeparateParametersFallBackWithReason) {
  LOCKSTEP_REQUIRE_CUDA();
  Tensor a = ones({4}, kCuda0).requires_grad_(), b = ones({2}, kCuda0).requires_grad_();
  optim::SGD sgd({a, b}, {.lr = 0.5});
  a.set_grad(ones({4}, kCuda0));
  b.set_grad(ones({2}, kCuda0));
  sgd.step();
  EXPECT_FALSE(sgd.last_cuda_step().flat);
  EXPECT_EQ(sgd.last_cuda_step().launches, 2);
  EXPECT_NE(sgd.last_cuda_step().fallback_reason.find("parameter 0 and parameter 1 lie in "
                                                      "different storages"),
            std::string::npos)
      << sgd.last_cuda_step().fallback_reason;
}

}  // namespace
}  // namespace lockstep::testing
