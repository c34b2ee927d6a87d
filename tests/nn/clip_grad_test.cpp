// nn::utils::clip_grad_norm_ against PyTorch 1.13. Expected values were generated with
// /usr/bin/python3 (torch 1.13.x):
//   ps = [torch.zeros(n, dtype=dt, requires_grad=True) ...]; ps[i].grad = torch.tensor(g_i,
//   dtype=dt) total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
//   print(repr(total.item()), [repr(x) for x in p.grad.tolist()] for p in ps)
// with g_0 = kG0, g_1 = kG1 below and a third parameter without a gradient. Float32 results
// are compared with the suite's float32 tolerance (rtol 1e-5, atol 1e-6), float64 ones with
// rtol 1e-12. (On the Debian build machine the float32 cases agree bit for bit too.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/nn/utils.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using nn::utils::clip_grad_norm_;

const std::vector<double> kG0{0.5, -1.25, 3.0, 0.75, -2.0, 1.5};
const std::vector<double> kG1{4.0, -0.125, 0.3, 2.2};
const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

std::vector<Tensor> params(DType dt = kFloat32) {
  std::vector<Tensor> ps;
  for (const auto* g : {&kG0, &kG1}) {
    Tensor p = zeros({static_cast<std::int64_t>(g->size())}, dt).requires_grad_(true);
    p.set_grad(tensor(std::span<const double>(*g), {static_cast<std::int64_t>(g->size())}, dt));
    ps.push_back(p);
  }
  ps.push_back(zeros({2}, dt).requires_grad_(true));  // no gradient: skipped
  return ps;
}

struct Case {
  const char* name;
  double max_norm, norm_type, total;
  std::vector<double> g0, g1;
};

TEST(ClipGradNorm, MatchesPyTorchFloat32) {
  const std::vector<Case> cases{
      {"l2 max_norm=1",
       1.0,
       2.0,
       6.2105255126953125,
       {0.08050847053527832, -0.2012711763381958, 0.4830508232116699, 0.12076270580291748,
        -0.3220338821411133, 0.24152541160583496},
       {0.6440677642822266, -0.02012711763381958, 0.04830508306622505, 0.35423728823661804}},
      {"inf max_norm=0.5",
       0.5,
       kInf,
       4.0,
       {0.062499985098838806, -0.1562499701976776, 0.37499991059303284, 0.09374997764825821,
        -0.24999994039535522, 0.18749995529651642},
       {0.49999988079071045, -0.015624996274709702, 0.03749999403953552, 0.2749999463558197}},
      {"l1 max_norm=2",
       2.0,
       1.0,
       15.625,
       {0.06399999558925629, -0.1599999964237213, 0.3839999735355377, 0.09599999338388443,
        -0.25599998235702515, 0.19199998676776886},
       {0.5119999647140503, -0.01599999889731407, 0.03839999809861183, 0.2815999984741211}},
      {"max_norm=0", 0.0, 2.0, 6.2105255126953125, {0, 0, 0, 0, 0, 0}, {0, 0, 0, 0}},
  };
  for (const auto& c : cases) {
    auto ps = params();
    double total = clip_grad_norm_(ps, c.max_norm, c.norm_type);
    EXPECT_TRUE(allclose(total, c.total)) << c.name << ": " << total;
    EXPECT_TRUE(AllClose(ps[0].grad().to_vector<double>(), c.g0)) << c.name;
    EXPECT_TRUE(AllClose(ps[1].grad().to_vector<double>(), c.g1)) << c.name;
    EXPECT_FALSE(ps[2].grad().defined()) << c.name;
  }
}

TEST(ClipGradNorm, MatchesPyTorchFloat64) {
  auto ps = params(kFloat64);
  double total = clip_grad_norm_(ps, 1.0);
  EXPECT_TRUE(allclose(total, 6.21052534009805, 1e-12, 0));
  EXPECT_TRUE(AllClose(ps[0].grad().to_vector<double>(),
                       {0.08050847426115355, -0.20127118565288388, 0.48305084556692135,
                        0.12076271139173034, -0.3220338970446142, 0.24152542278346067},
                       1e-12, 0));
  EXPECT_TRUE(
      AllClose(ps[1].grad().to_vector<double>(),
               {0.6440677940892284, -0.02012711856528839, 0.04830508455669213, 0.3542372867490757},
               1e-12, 0));
}

TEST(ClipGradNorm, GradientsBelowMaxNormAreUntouched) {
  auto ps = params();
  const Tensor g0 = ps[0].grad().clone(), g1 = ps[1].grad().clone();
  double total = clip_grad_norm_(ps, 100.0);  // torch: 6.2105255126953125, grads unchanged
  EXPECT_TRUE(allclose(total, 6.2105255126953125));
  EXPECT_TRUE(BitEqual(ps[0].grad(), g0));
  EXPECT_TRUE(BitEqual(ps[1].grad(), g1));
  // a norm exactly at max_norm is scaled by max/(max + 1e-6), i.e. barely (PyTorch's epsilon)
  auto ps2 = params(kFloat64);
  total = clip_grad_norm_(ps2, 6.21052534009805);
  EXPECT_LT(std::abs(ps2[0].grad().to_vector<double>()[2]), 3.0);
  EXPECT_GT(std::abs(ps2[0].grad().to_vector<double>()[2]), 3.0 * (1 - 1e-6));
}

TEST(ClipGradNorm, ScalesInPlace) {
  auto ps = params();
  Tensor g = ps[0].grad();
  clip_grad_norm_(ps, 1.0);
  EXPECT_TRUE(g.is_same(ps[0].grad()));
  EXPECT_TRUE(allclose(g.to_vector<double>()[0], 0.08050847053527832));
}

TEST(ClipGradNorm, NoGradientsReturnsZero) {
  std::vector<Tensor> ps{zeros({3}).requires_grad_(true), zeros({2}).requires_grad_(true)};
  EXPECT_EQ(clip_grad_norm_(ps, 1.0), 0.0);
  EXPECT_EQ(clip_grad_norm_({}, 1.0), 0.0);
  EXPECT_FALSE(ps[0].grad().defined());
  // all-zero gradients: norm 0, coefficient clamped to 1
  ps[0].set_grad(zeros({3}));
  EXPECT_EQ(clip_grad_norm_(ps, 1.0), 0.0);
  EXPECT_EQ(ps[0].grad().to_vector<double>(), std::vector<double>(3, 0.0));
}

TEST(ClipGradNorm, NonFiniteNormIsNotAnErrorAsPyTorch) {
  // torch 1.13, error_if_nonfinite=False: grads [1, nan], [2, 3] -> total nan, every grad nan;
  // grads [1, inf], [2, 3] -> total inf, coefficient 0: [0, nan], [0, 0].
  auto make = [](double bad) {
    Tensor a = zeros({2}).requires_grad_(true), b = zeros({2}).requires_grad_(true);
    a.set_grad(tensor(std::vector<float>{1.0f, static_cast<float>(bad)}, {2}));
    b.set_grad(tensor(std::vector<float>{2.0f, 3.0f}, {2}));
    return std::vector<Tensor>{a, b};
  };
  auto ps = make(kNan);
  EXPECT_TRUE(std::isnan(clip_grad_norm_(ps, 1.0)));
  for (auto& p : ps)
    for (double v : p.grad().to_vector<double>()) EXPECT_TRUE(std::isnan(v));
  ps = make(kInf);
  EXPECT_EQ(clip_grad_norm_(ps, 1.0), kInf);
  auto a = ps[0].grad().to_vector<double>(), b = ps[1].grad().to_vector<double>();
  EXPECT_EQ(a[0], 0.0);
  EXPECT_TRUE(std::isnan(a[1]));
  EXPECT_EQ(b, (std::vector<double>{0.0, 0.0}));
  ps = make(kNan);
  EXPECT_TRUE(std::isnan(clip_grad_norm_(ps, 1.0, kInf)));
}

TEST(ClipGradNorm, InvalidArgumentsAreErrors) {
  auto ps = params();
  const Tensor g0 = ps[0].grad().clone();
  EXPECT_THROW(clip_grad_norm_(ps, -1.0), ValueError);
  EXPECT_THROW(clip_grad_norm_(ps, kNan), ValueError);
  EXPECT_THROW(clip_grad_norm_(ps, kInf), ValueError);
  EXPECT_THROW(clip_grad_norm_(ps, 1.0, 0.0), ValueError);
  EXPECT_THROW(clip_grad_norm_(ps, 1.0, -2.0), ValueError);
  EXPECT_THROW(clip_grad_norm_(ps, 1.0, kNan), ValueError);
  EXPECT_THROW(clip_grad_norm_({ps[0], Tensor()}, 1.0), ValueError);
  EXPECT_TRUE(BitEqual(ps[0].grad(), g0));  // nothing clipped by a rejected call
  try {
    clip_grad_norm_(ps, -1.0);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("max_norm"), std::string::npos) << e.what();
  }
  Tensor ip = zeros({2}, kInt64);
  ip.set_grad(zeros({2}, kInt64));
  EXPECT_THROW(clip_grad_norm_({ip}, 1.0), DTypeError);
}

}  // namespace
}  // namespace lockstep::testing
