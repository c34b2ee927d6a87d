// StepLR and CosineAnnealingLR against PyTorch 1.13. Expected values were generated with
//   /usr/bin/python3 (torch 1.13.x):
//     p = torch.nn.Parameter(torch.zeros(1)); opt = torch.optim.SGD([p], lr=0.1)
//     s = torch.optim.lr_scheduler.StepLR(opt, 3, 0.5)   # or CosineAnnealingLR(opt, T, eta_min)
//     out = [s.get_last_lr()[0]]
//     for _ in range(N): opt.step(); s.step(); out.append(s.get_last_lr()[0])
//     print(*map(repr, out))
// (entry e is the lr after the constructor and e steps, i.e. at last_epoch e). Tolerance: rtol
// 1e-12, atol 1e-15. The recursive form is evaluated operation by operation as in Python, so the
// bits normally agree (they do on the Debian build machine, checked with rtol 0); the tolerance
// only allows for a libm cos() that differs by an ulp.
#include "lockstep/optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

constexpr double kRtol12 = 1e-12;
constexpr double kAtol15 = 1e-15;

optim::SGD make_sgd(Tensor& p, double lr = 0.1) {
  p = zeros({1}).requires_grad_(true);
  return optim::SGD({p}, {.lr = lr});
}

template <class Scheduler, class... Args>
std::vector<double> run(int steps, Args... args) {
  Tensor p;
  auto opt = make_sgd(p);
  Scheduler s(opt, args...);
  std::vector<double> out{s.get_last_lr()};
  for (int i = 0; i < steps; ++i) {
    s.step();
    EXPECT_EQ(s.get_last_lr(), opt.lr());
    out.push_back(s.get_last_lr());
  }
  EXPECT_EQ(s.last_epoch(), steps);
  return out;
}

TEST(LRScheduler, StepLRMatchesPyTorch) {
  // StepLR(step_size=3, gamma=0.5), 25 steps
  const std::vector<double> expected{
      0.1,        0.1,        0.1,        0.05,        0.05,       0.05,      0.025,
      0.025,      0.025,      0.0125,     0.0125,      0.0125,     0.00625,   0.00625,
      0.00625,    0.003125,   0.003125,   0.003125,    0.0015625,  0.0015625, 0.0015625,
      0.00078125, 0.00078125, 0.00078125, 0.000390625, 0.000390625};
  EXPECT_TRUE(AllClose(run<optim::StepLR>(25, std::int64_t{3}, 0.5), expected, kRtol12, kAtol15));
}

TEST(LRScheduler, CosineAnnealingMatchesPyTorchPastTMax) {
  // CosineAnnealingLR(T_max=10, eta_min=0.001), 25 steps: down to eta_min at 10, the special
  // branch at 11 and 21 ((e - 1 - T_max) % (2 T_max) == 0), back up to ~0.1 at 20.
  const std::vector<double> expected{0.1,
                                     0.09757729755661011,
                                     0.0905463412215599,
                                     0.07959536998847742,
                                     0.0657963412215599,
                                     0.0505,
                                     0.03520365877844011,
                                     0.02140463001152259,
                                     0.010453658778440109,
                                     0.0034227024433899004,
                                     0.001,
                                     0.0034227024433899004,
                                     0.01045365877844014,
                                     0.02140463001152267,
                                     0.035203658778440255,
                                     0.05050000000000022,
                                     0.06579634122156018,
                                     0.07959536998847777,
                                     0.09054634122156031,
                                     0.09757729755661054,
                                     0.10000000000000045,
                                     0.09757729755661054,
                                     0.09054634122156033,
                                     0.07959536998847778,
                                     0.0657963412215602,
                                     0.050500000000000225};
  auto got = run<optim::CosineAnnealingLR>(25, std::int64_t{10}, 0.001);
  EXPECT_TRUE(AllClose(got, expected, kRtol12, kAtol15));
  // the recursive form's drift (0.10000000000000045 at 20) is reproduced, not the closed form's
  EXPECT_GT(got[20], 0.1);
}

TEST(LRScheduler, CosineAnnealingSmallTMaxMatchesPyTorch) {
  // CosineAnnealingLR(T_max=1, eta_min=0): alternates 0.1, 0.0 (special branch every 2 steps)
  EXPECT_TRUE(AllClose(run<optim::CosineAnnealingLR>(6, std::int64_t{1}, 0.0),
                       {0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1}, kRtol12, kAtol15));
  // CosineAnnealingLR(T_max=3, eta_min=0.05), 25 steps
  const std::vector<double> expected{0.1,
                                     0.08750000000000001,
                                     0.06250000000000001,
                                     0.05,
                                     0.0625,
                                     0.08750000000000002,
                                     0.10000000000000003,
                                     0.08750000000000004,
                                     0.06250000000000003,
                                     0.05,
                                     0.0625,
                                     0.08749999999999995,
                                     0.09999999999999996,
                                     0.08749999999999997,
                                     0.06250000000000001,
                                     0.05,
                                     0.0625,
                                     0.08750000000000012,
                                     0.10000000000000014,
                                     0.08750000000000016,
                                     0.06250000000000003,
                                     0.05,
                                     0.0625,
                                     0.08750000000000005,
                                     0.10000000000000017,
                                     0.0875000000000001};
  EXPECT_TRUE(AllClose(run<optim::CosineAnnealingLR>(25, std::int64_t{3}, 0.05), expected, kRtol12,
                       kAtol15));
}

TEST(LRScheduler, ChainsFromTheOptimizersCurrentLr) {
  // PyTorch's recursive StepLR multiplies whatever lr the optimizer has now.
  Tensor p;
  auto opt = make_sgd(p);
  optim::StepLR s(opt, 2, 0.5);
  s.step();
  opt.set_lr(1.0);
  s.step();  // epoch 2: 1.0 * 0.5
  EXPECT_EQ(opt.lr(), 0.5);
  EXPECT_EQ(s.base_lr(), 0.1);
}

template <class Make>
void check_resume(Make make) {
  // straight: 17 steps; resumed: a fresh optimizer + scheduler restored after 7 steps, then 10
  // more. Bit-identical lrs.
  Tensor p1, p2;
  auto opt1 = make_sgd(p1);
  auto s1 = make(opt1);
  for (int i = 0; i < 7; ++i) s1->step();
  StateDict saved = s1->state_dict();
  EXPECT_EQ(saved.at("last_epoch").dtype(), kInt64);
  EXPECT_EQ(saved.at("last_lr").dtype(), kFloat64);
  EXPECT_EQ(saved.at("base_lr").dtype(), kFloat64);
  auto opt2 = make_sgd(p2, 0.1);
  auto s2 = make(opt2);
  s2->load_state_dict(saved);
  EXPECT_EQ(s2->last_epoch(), 7);
  EXPECT_EQ(opt2.lr(), s1->get_last_lr());
  for (int i = 0; i < 10; ++i) {
    s1->step();
    s2->step();
    EXPECT_EQ(s1->get_last_lr(), s2->get_last_lr()) << "step " << i;
    EXPECT_EQ(opt1.lr(), opt2.lr());
  }
}

TEST(LRScheduler, StateDictResumesBitIdentically) {
  check_resume([](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 3, 0.5); });
  check_resume(
      [](optim::Optimizer& o) { return std::make_unique<optim::CosineAnnealingLR>(o, 5, 0.001); });
}

TEST(LRScheduler, BadStateDictIsRejectedAndChangesNothing) {
  Tensor p;
  auto opt = make_sgd(p);
  optim::StepLR s(opt, 3, 0.5);
  s.step();
  const StateDict good = s.state_dict();
  auto with = [&](const std::string& key, const Tensor& value) {
    StateDict sd;
    for (const auto& [k, v] : good) sd.insert(k, k == key ? value : v);
    if (!sd.contains(key)) sd.insert(key, value);
    return sd;
  };
  auto without = [&](const std::string& key) {
    StateDict sd;
    for (const auto& [k, v] : good)
      if (k != key) sd.insert(k, v);
    return sd;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<std::string, StateDict>> bad{
      {"missing last_epoch", without("last_epoch")},
      {"missing base_lr", without("base_lr")},
      {"missing last_lr", without("last_lr")},
      {"unknown key", with("gamma", scalar_tensor(0.5, kFloat64))},
      {"not one element", with("last_lr", zeros({2}, kFloat64))},
      {"undefined", with("base_lr", Tensor())},
      {"negative epoch", with("last_epoch", scalar_tensor(-1, kInt64))},
      {"fractional epoch", with("last_epoch", scalar_tensor(2.5, kFloat64))},
      {"negative lr", with("last_lr", scalar_tensor(-0.1, kFloat64))},
      {"nan lr", with("base_lr", scalar_tensor(nan, kFloat64))},
  };
  for (const auto& [what, sd] : bad) {
    EXPECT_THROW(s.load_state_dict(sd), StateDictError) << what;
    EXPECT_EQ(s.last_epoch(), 1) << what;
    EXPECT_EQ(s.base_lr(), 0.1) << what;
    EXPECT_EQ(opt.lr(), 0.1) << what;
  }
  try {
    s.load_state_dict(without("last_lr"));
  } catch (const StateDictError& e) {
    EXPECT_NE(std::string(e.what()).find("last_lr"), std::string::npos) << e.what();
  }
}

TEST(LRScheduler, InvalidArgumentsAreValueErrors) {
  Tensor p;
  auto opt = make_sgd(p);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(optim::StepLR(opt, 0, 0.5), ValueError);
  EXPECT_THROW(optim::StepLR(opt, -3, 0.5), ValueError);
  EXPECT_THROW(optim::StepLR(opt, 3, nan), ValueError);
  EXPECT_THROW(optim::StepLR(opt, 3, inf), ValueError);
  EXPECT_THROW(optim::StepLR(opt, 3, -0.5), ValueError);
  EXPECT_THROW(optim::CosineAnnealingLR(opt, 0, 0.0), ValueError);
  EXPECT_THROW(optim::CosineAnnealingLR(opt, -1, 0.0), ValueError);
  EXPECT_THROW(optim::CosineAnnealingLR(opt, 10, nan), ValueError);
  EXPECT_THROW(optim::CosineAnnealingLR(opt, 10, inf), ValueError);
  EXPECT_THROW(optim::CosineAnnealingLR(opt, 10, -0.001), ValueError);
  EXPECT_EQ(opt.lr(), 0.1);  // the failed constructors did not step
  try {
    optim::StepLR(opt, 0, 0.5);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("step_size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::testing
