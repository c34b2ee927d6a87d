// Optimizers against PyTorch's update formulas (torch.optim.SGD / Adam / AdamW docs), computed
// here by hand in double for three steps; gradient-is-none semantics; state_dict; bad options.
#include <gtest/gtest.h>

#include <cmath>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using Vec = std::vector<double>;
const Vec kP0{0.5, -1.0, 2.0};
const std::vector<Vec> kGrads{{0.1, -0.2, 0.3}, {-0.4, 0.5, 0.05}, {0.2, 0.2, -0.1}};

Tensor param(const Vec& v, DType dt = kFloat64) {
  return tensor(std::span<const double>(v)).to(dt).requires_grad_(true);
}
Tensor grad_like(const Vec& v, const Tensor& p) {
  return tensor(std::span<const double>(v)).to(p.dtype());
}

// torch.optim.SGD, written from its documented algorithm.
Vec sgd_expected(optim::SGDOptions o) {
  Vec p = kP0, b(3);
  for (std::size_t t = 0; t < kGrads.size(); ++t)
    for (std::size_t i = 0; i < 3; ++i) {
      double d = kGrads[t][i] + o.weight_decay * p[i];
      if (o.momentum != 0) {
        b[i] = t == 0 ? d : o.momentum * b[i] + (1 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * b[i] : b[i];
      }
      p[i] -= o.lr * d;
    }
  return p;
}

// torch.optim.Adam / AdamW in the textbook form: bias-corrected moments m̂, v̂.
Vec adam_expected(double lr, double b1, double b2, double eps, double wd, bool decoupled) {
  Vec p = kP0, m(3), v(3);
  for (std::size_t t = 1; t <= kGrads.size(); ++t)
    for (std::size_t i = 0; i < 3; ++i) {
      double g = kGrads[t - 1][i];
      if (decoupled)
        p[i] *= 1 - lr * wd;
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  return p;
}

template <class Opt, class Options>
Vec run3(Options o, DType dt) {
  Tensor p = param(kP0, dt);
  Opt opt({p}, o);
  for (const Vec& g : kGrads) {
    p.set_grad(grad_like(g, p));
    opt.step();
  }
  return p.to_vector<double>();
}

TEST(SGD, HandComputedScalarMomentum) {
  Tensor p = param({1.0});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  Vec seen;
  for (int i = 0; i < 3; ++i) {
    p.set_grad(grad_like({1.0}, p));
    opt.step();
    seen.push_back(p.item());
  }
  // buffers 1, 1.9, 2.71 -> p = 0.9, 0.71, 0.439
  EXPECT_TRUE(AllClose(seen, {0.9, 0.71, 0.439}, 1e-12, 1e-15));
}

TEST(SGD, MatchesPyTorchFormulas) {
  std::vector<optim::SGDOptions> configs = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.3},
      {.lr = 0.1, .momentum = 0.9, .nesterov = true},
      {.lr = 0.1, .weight_decay = 0.2},
      {.lr = 0.1, .momentum = 0.7, .dampening = 0.1, .weight_decay = 0.05},
      {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
  };
  for (std::size_t c = 0; c < configs.size(); ++c) {
    Vec expected = sgd_expected(configs[c]);
    EXPECT_TRUE(AllClose(run3<optim::SGD>(configs[c], kFloat64), expected, 1e-12, 1e-15))
        << "config " << c;
    EXPECT_TRUE(AllClose(run3<optim::SGD>(configs[c], kFloat32), expected)) << "config " << c;
  }
}

TEST(Adam, MatchesPyTorchFormulas) {
  Vec e1 = adam_expected(0.1, 0.9, 0.999, 1e-8, 0.0, false);
  EXPECT_TRUE(AllClose(run3<optim::Adam>(optim::AdamOptions{.lr = 0.1}, kFloat64), e1, 1e-12, 1e-15));
  EXPECT_TRUE(AllClose(run3<optim::Adam>(optim::AdamOptions{.lr = 0.1}, kFloat32), e1));
  Vec e2 = adam_expected(0.01, 0.8, 0.99, 1e-3, 0.1, false);
  optim::AdamOptions o2{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3, .weight_decay = 0.1};
  EXPECT_TRUE(AllClose(run3<optim::Adam>(o2, kFloat64), e2, 1e-12, 1e-15));
  // first step moves each element by about lr against its gradient's sign
  Tensor p = param({1.0});
  optim::Adam opt({p}, {.lr = 0.1});
  p.set_grad(grad_like({0.5}, p));
  opt.step();
  EXPECT_NEAR(p.item(), 0.9, 1e-8);
}

TEST(AdamW, MatchesPyTorchFormulas) {
  Vec e1 = adam_expected(0.1, 0.9, 0.999, 1e-8, 0.01, true);  // AdamW's default decay 0.01
  EXPECT_TRUE(AllClose(run3<optim::AdamW>(optim::AdamWOptions{.lr = 0.1}, kFloat64), e1, 1e-12, 1e-15));
  Vec e2 = adam_expected(0.05, 0.9, 0.95, 1e-6, 0.5, true);
  optim::AdamWOptions o2{.lr = 0.05, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.5};
  EXPECT_TRUE(AllClose(run3<optim::AdamW>(o2, kFloat64), e2, 1e-12, 1e-15));
  EXPECT_TRUE(AllClose(run3<optim::AdamW>(o2, kFloat32), e2));
  // decoupled decay differs from Adam's L2 term
  EXPECT_FALSE(AllClose(e2, adam_expected(0.05, 0.9, 0.95, 1e-6, 0.5, false)));
}

TEST(Optimizer, ParameterWithoutGradIsUntouchedAndHasNoState) {
  Tensor a = param({1.0, 2.0}), b = param({3.0, -4.0});
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5});
  a.set_grad(grad_like({1.0, 1.0}, a));
  opt.step();
  EXPECT_EQ(b.to_vector<double>(), (Vec{3.0, -4.0}));  // no decay, no momentum
  EXPECT_TRUE(opt.state(0, "momentum_buffer").defined());
  EXPECT_FALSE(opt.state(1, "momentum_buffer").defined());
  EXPECT_FALSE(opt.state_dict().contains("state.1.momentum_buffer"));

  b.set_grad(grad_like({1.0, 0.0}, b));  // first gradient: buffer starts as d = g + wd·p
  a.set_grad(Tensor());                   // a has a buffer but no gradient now: skipped
  Vec a_before = a.to_vector<double>(), buf_before = opt.state(0, "momentum_buffer").to_vector<double>();
  opt.step();
  EXPECT_EQ(a.to_vector<double>(), a_before);
  EXPECT_EQ(opt.state(0, "momentum_buffer").to_vector<double>(), buf_before);
  Vec d{1.0 + 0.5 * 3.0, 0.0 + 0.5 * -4.0};
  EXPECT_TRUE(AllClose(opt.state(1, "momentum_buffer").to_vector<double>(), d, 1e-12, 1e-15));
  EXPECT_TRUE(AllClose(b.to_vector<double>(), {3.0 - 0.1 * d[0], -4.0 - 0.1 * d[1]}, 1e-12, 1e-15));
}

TEST(Optimizer, AdamStateStartsAtTheFirstGradient) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::Adam opt({a, b}, {.lr = 0.1, .weight_decay = 0.1});
  a.set_grad(grad_like({0.3}, a));
  opt.step();
  opt.step();
  EXPECT_EQ(opt.state(0, "step").item(), 2.0);
  EXPECT_FALSE(opt.state(1, "step").defined());
  EXPECT_FALSE(opt.state(1, "exp_avg").defined());
  EXPECT_EQ(b.item(), 2.0);
  b.set_grad(grad_like({0.3}, b));
  a.set_grad(Tensor());
  opt.step();
  EXPECT_EQ(opt.state(1, "step").item(), 1.0);
  EXPECT_EQ(opt.state(0, "step").item(), 2.0);  // a was skipped
  // b's own first step (bias correction with t = 1): g = 0.3 + 0.1·2 = 0.5, m̂ = g, v̂ = g²
  EXPECT_NEAR(b.item(), 2.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-12);
}

TEST(Optimizer, StateDictRoundTrip) {
  Tensor p = param(kP0), q = param(kP0);
  optim::Adam a({p}, {.lr = 0.05, .weight_decay = 0.1});
  for (int i = 0; i < 2; ++i) {
    p.set_grad(grad_like(kGrads[i], p));
    a.step();
  }
  StateDict sd = a.state_dict();
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"state.0.step", "state.0.exp_avg",
                                                  "state.0.exp_avg_sq", "param_groups.0.lr"}));
  {
    no_grad g;
    q.copy_(p);
  }
  optim::Adam b({q}, {.lr = 0.5, .weight_decay = 0.1});  // only lr is in param_groups
  b.load_state_dict(sd);
  EXPECT_EQ(b.lr(), 0.05);
  p.set_grad(grad_like(kGrads[2], p));
  q.set_grad(grad_like(kGrads[2], q));
  a.step();
  b.step();
  EXPECT_EQ(p.to_vector<double>(), q.to_vector<double>());
  EXPECT_TRUE(AllClose(p.to_vector<double>(), adam_expected(0.05, 0.9, 0.999, 1e-8, 0.1, false),
                       1e-12, 1e-15));
}

TEST(Optimizer, LoadStateDictRejectsBadKeys) {
  Tensor p = param(kP0);
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(grad_like(kGrads[0], p));
  opt.step();
  Vec buf = opt.state(0, "momentum_buffer").to_vector<double>();
  auto expect_error = [&](const std::string& key, const Tensor& value) {
    StateDict sd = opt.state_dict();
    sd.insert("state.0.momentum_buffer", full({3}, 42.0, kFloat64));  // valid, must not land
    sd.insert(key, value);
    try {
      opt.load_state_dict(sd);
      ADD_FAILURE() << "expected StateDictError for " << key;
    } catch (const StateDictError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    EXPECT_EQ(opt.state(0, "momentum_buffer").to_vector<double>(), buf) << key;
    EXPECT_EQ(opt.lr(), 0.1);
  };
  expect_error("bogus", zeros({3}, kFloat64));
  expect_error("state.0.exp_avg", zeros({3}, kFloat64));  // not an SGD state
  expect_error("state.3.momentum_buffer", zeros({3}, kFloat64));
  expect_error("state.x.momentum_buffer", zeros({3}, kFloat64));
  expect_error("state.0.momentum_buffer", zeros({4}, kFloat64));
  expect_error("param_groups.0.lr", scalar_tensor(-1.0, kFloat64));
}

TEST(Optimizer, InvalidHyperParametersThrow) {
  Tensor p = param({1.0});
  EXPECT_THROW(optim::SGD({p}, {.lr = -0.1}), ValueError);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .momentum = -0.5}), ValueError);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .weight_decay = -1}), ValueError);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), ValueError);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               ValueError);
  EXPECT_THROW(optim::Adam({p}, {.lr = -1}), ValueError);
  EXPECT_THROW(optim::Adam({p}, {.beta1 = 1.0}), ValueError);
  EXPECT_THROW(optim::Adam({p}, {.beta2 = -0.1}), ValueError);
  EXPECT_THROW(optim::Adam({p}, {.eps = -1e-8}), ValueError);
  EXPECT_THROW(optim::AdamW({p}, {.weight_decay = -0.01}), ValueError);
  EXPECT_THROW(optim::SGD({}, {.lr = 0.1}), ValueError);
  EXPECT_THROW(optim::SGD({Tensor()}, {.lr = 0.1}), ValueError);  // undefined
  {
    // a frozen parameter is accepted (as PyTorch) and, having no gradient, never changes
    Tensor frozen = ones({2});
    optim::SGD sgd({frozen}, {.lr = 0.1, .momentum = 0.9});
    sgd.step();
    EXPECT_EQ(frozen.to_vector<double>(), (std::vector<double>{1.0, 1.0}));
  }
  optim::SGD ok({p}, {.lr = 0.1});
  EXPECT_THROW(ok.set_lr(-1), ValueError);
  EXPECT_EQ(ok.lr(), 0.1);
}

TEST(Optimizer, ZeroGradWithoutSetToNoneZeroes) {
  Tensor p = param({1.0, 2.0});
  optim::SGD opt({p}, {.lr = 0.1});
  p.set_grad(grad_like({3.0, 4.0}, p));
  opt.zero_grad(false);
  ASSERT_TRUE(p.grad().defined());
  EXPECT_EQ(p.grad().to_vector<double>(), (Vec{0, 0}));
  opt.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace lockstep::testing
