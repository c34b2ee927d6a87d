// Breaker probes: the CPU optimizers, now built on the shared per-element rules
// (include/lockstep/ops/detail/update_rules.h), still follow torch.optim at float64 — SGD with momentum, dampening
// and weight decay, SGD nesterov with weight decay, Adam with (coupled) weight decay, AdamW —
// including the has-gradient rule (a parameter without a gradient at one step is skipped: its
// value and state untouched, its Adam step count not advanced).
//
// Expected values from PyTorch 1.13 (float64, default single-tensor implementations):
//   /usr/bin/python3 optim_traj.py   (the script is reproduced in the comment below)
// import torch; torch.set_default_dtype(torch.float64)
// P0 = [[0.5, -1.25, 2.0], [0.75, -0.1, 1.5, -2.5]]
// def grad(p, k, i): return torch.tensor([((0.5*x*x) - (0.3*x)) + (0.1*(k+1) + 0.01*i)
//                                         for x in p.tolist()])
// def run(make):
//     ps = [torch.tensor(v, requires_grad=True) for v in P0]; opt = make(ps)
//     for k in range(6):
//         for i, p in enumerate(ps):
//             p.grad = None if (i == 1 and k == 2) else grad(p.detach(), k, i)
//         opt.step()
//     return [p.detach().tolist() for p in ps]
// cases: SGD(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05),
//        SGD(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.05),
//        Adam(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1), AdamW(same)
// printed with '%.17g'.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

using Params = std::vector<std::vector<double>>;

const Params kP0 = {{0.5, -1.25, 2.0}, {0.75, -0.1, 1.5, -2.5}};

struct Case {
  std::string name;
  Params expected;    // float64
  Params expected32;  // the same script at float32 (torch.set_default_dtype(torch.float32),
                      // gradients computed in double from the float values, then stored as
                      // float32; printed with '%.9g')
};

const Case kCases[] = {
    {"SgdMomentumDampeningWeightDecay",
     {{0.15023443009477877, -4.1700895397688384, 0.24375964191304136},
      {0.38956229198713688, -0.43109787802367622, 0.60565394286316421, -10.265523622785208}},
     {{0.150234446, -4.17008924, 0.243759647},
      {0.389562309, -0.431097835, 0.605654001, -10.2655239}}},
    {"SgdNesterovWeightDecay",
     {{-0.037117575353055016, -8.9416653978040923, 0.14722261436612277},
      {0.2104969009829589, -0.67432121901352093, 0.39928274046853113, -34.020351439662676}},
     {{-0.0371175483, -8.9416647, 0.147222489},
      {0.210496902, -0.674321234, 0.399282664, -34.0203514}}},
    {"AdamWeightDecay",
     {{0.19842137948336641, -1.5545077780114795, 1.6994970627875632},
      {0.49841941277866464, -0.34654325858226276, 1.2481230470722315, -2.7518422554975346}},
     {{0.198421404, -1.55450785, 1.6994971}, {0.498419434, -0.346543252, 1.24812293, -2.7518425}}},
    {"AdamWWeightDecay",
     {{0.19166020542501158, -1.513494325282607, 1.6442361103015939},
      {0.48419883855658946, -0.3419610058852246, 1.2133289278389887, -2.6872379513017925}},
     {{0.191660225, -1.51349425, 1.64423621},
      {0.484198958, -0.341960996, 1.21332896, -2.68723774}}},
};

std::unique_ptr<optim::Optimizer> make(const std::string& name, std::vector<Tensor> ps) {
  if (name == "SgdMomentumDampeningWeightDecay")
    return std::make_unique<optim::SGD>(
        ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.05});
  if (name == "SgdNesterovWeightDecay")
    return std::make_unique<optim::SGD>(
        ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.8, .weight_decay = 0.05, .nesterov = true});
  if (name == "AdamWeightDecay")
    return std::make_unique<optim::Adam>(
        ps, optim::AdamOptions{
                .lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1});
  return std::make_unique<optim::AdamW>(
      ps, optim::AdamWOptions{
              .lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1});
}

// Six steps of `name` from kP0 in `dtype`, the gradient of parameter 1 left out at step 2.
std::vector<std::vector<double>> trajectory(const std::string& name, DType dtype) {
  std::vector<Tensor> ps;
  for (const auto& v : kP0)
    ps.push_back(tensor(std::span<const double>(v)).to(dtype).requires_grad_(true));
  auto opt = make(name, ps);
  for (int k = 0; k < 6; ++k) {
    for (std::size_t i = 0; i < ps.size(); ++i) {
      if (i == 1 && k == 2) {
        ps[i].set_grad(Tensor());
        continue;
      }
      std::vector<double> g;
      for (double x : ps[i].to(kFloat64).to_vector<double>())
        g.push_back(((0.5 * x * x) - (0.3 * x)) + (0.1 * (k + 1) + 0.01 * static_cast<double>(i)));
      ps[i].set_grad(tensor(std::span<const double>(g)).to(dtype));
    }
    opt->step();
  }
  std::vector<std::vector<double>> out;
  for (const Tensor& p : ps) out.push_back(p.detach().to(kFloat64).to_vector<double>());
  return out;
}

TEST(OptimBreak, Float64TrajectoriesMatchPyTorch) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const auto got = trajectory(c.name, kFloat64);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), c.expected[i].size());
      for (std::size_t j = 0; j < got[i].size(); ++j)
        // PyTorch's vectorised CPU kernels may fuse a·b + c (FMA): last-bit differences only.
        EXPECT_NEAR(got[i][j], c.expected[i][j], 1e-13 * std::abs(c.expected[i][j]))
            << "parameter " << i << " element " << j;
    }
  }
}

// The same trajectories in float32 (the dtype the CLI trains in): within a few float roundings
// of PyTorch's (its vectorised kernels may fuse a·b + c; the quadratic gradient amplifies a
// difference over six steps; measured at most 3.7e-8, on an element that cancels to -0.037).
TEST(OptimBreak, Float32TrajectoriesMatchPyTorch) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const auto got = trajectory(c.name, kFloat32);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), c.expected32[i].size());
      for (std::size_t j = 0; j < got[i].size(); ++j)
        EXPECT_NEAR(got[i][j], c.expected32[i][j], 1e-6 + 1e-6 * std::abs(c.expected32[i][j]))
            << "parameter " << i << " element " << j;
    }
  }
}

}  // namespace
}  // namespace lockstep::testing
