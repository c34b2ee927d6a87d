// The float64 gradient check shared by the op tests (gradcheck_test, conv2d_test,
// pool_norm_test): analytic gradients from backward() against central differences.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace lockstep::testing {

/// `f` computes a float64 output from `leaves` (float64 tensors requiring grad). With a fixed
/// random weighting R drawn from `gen`, L = Σ f() ⊙ R; each leaf's gradient from
/// L.backward() must be allclose (rtol 1e-5, atol 1e-6) to (L(v + eps) − L(v − eps)) / (2 eps)
/// for every element v, eps = 1e-6 (torch.autograd.gradcheck's check, with a random
/// projection of the output). The failure names the leaf (by index) and the element.
inline ::testing::AssertionResult gradcheck(const std::function<Tensor()>& f,
                                            const std::vector<Tensor*>& leaves, Generator& gen) {
  Tensor out = f();
  if (out.dtype() != kFloat64) return ::testing::AssertionFailure() << "output is not float64";
  if (!out.requires_grad())
    return ::testing::AssertionFailure() << "the op recorded no autograd history";
  Tensor w = randn(out.shape(), kFloat64, &gen);
  sum(mul(out, w)).backward();
  const auto wv = w.to_vector<double>();
  auto loss = [&] {
    NoGradGuard no_grad;
    const auto o = f().to_vector<double>();
    double s = 0;
    for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * wv[i];
    return s;
  };
  const double eps = 1e-6;
  for (std::size_t k = 0; k < leaves.size(); ++k) {
    Tensor& t = *leaves[k];
    Tensor g = t.grad();
    if (!g.defined()) return ::testing::AssertionFailure() << "input " << k << " got no gradient";
    if (g.shape() != t.shape())
      return ::testing::AssertionFailure() << "input " << k << ": gradient shape "
                                           << g.shape().str() << " vs " << t.shape().str();
    double* p = t.data_ptr<double>();
    std::vector<double> numeric(static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < numeric.size(); ++i) {
      const double orig = p[i];
      p[i] = orig + eps;
      const double lp = loss();
      p[i] = orig - eps;
      const double lm = loss();
      p[i] = orig;
      numeric[i] = (lp - lm) / (2 * eps);
    }
    auto r = AllClose(g.to_vector<double>(), numeric, 1e-5, 1e-6);
    if (!r) return r << " (input " << k << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lockstep::testing
