// Every fast kernel agrees with its plain reference kernel: each case runs forward + backward
// under KernelMode::Fast and KernelMode::Reference on the same inputs, in float32 and float64,
// and compares the outputs and all input gradients. The cases cover the ops that dispatch to a
// kernel family: GEMM (matmul, linear), broadcasting binary ops (each fast path and the general
// one), sum_to (the reductions in their backward) and fused cross-entropy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using ops::KernelMode;
using ops::KernelModeGuard;
using Inputs = std::vector<Tensor>;

struct Case {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const Inputs&)> fn;
  bool positive = false;  // inputs in [0.5, inf) (div denominators)
  double scale = 1.0;     // inputs are scale * N(0, 1)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Tensor ints(std::vector<std::int64_t> v) { return tensor(std::span<const std::int64_t>(v)); }
Tensor targets(std::int64_t n, std::int64_t c) {
  Generator g(5);
  return randint(0, c, {n}, kInt64, &g);
}

Tensor Add(const Inputs& x) { return add(x[0], x[1]); }
Tensor Sub(const Inputs& x) { return sub(x[0], x[1]); }
Tensor Mul(const Inputs& x) { return mul(x[0], x[1]); }
Tensor Div(const Inputs& x) { return div(x[0], x[1]); }
Tensor Matmul(const Inputs& x) { return matmul(x[0], x[1]); }
Tensor Linear(const Inputs& x) { return linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor()); }

std::vector<Case> cases() {
  const Shape B{7, 33}, row{33}, row2{1, 33}, one{1}, s0{};
  return {
      // GEMM: matmul and linear, including zero-size M, N, K
      {"matmul_1x1x1", {{1, 1}, {1, 1}}, Matmul},
      {"matmul_7x33x5", {{7, 33}, {33, 5}}, Matmul},
      {"matmul_128x784x256", {{128, 784}, {784, 256}}, Matmul},
      {"matmul_M0", {{0, 5}, {5, 3}}, Matmul},
      {"matmul_K0", {{3, 0}, {0, 4}}, Matmul},
      {"matmul_N0", {{4, 5}, {5, 0}}, Matmul},
      {"linear_128x784x256", {{128, 784}, {256, 784}, {256}}, Linear},
      {"linear_7x33x5", {{7, 33}, {5, 33}, {5}}, Linear},
      {"linear_nobias", {{7, 33}, {5, 33}}, Linear},
      {"linear_1d", {{33}, {5, 33}, {5}}, Linear},
      {"linear_3d", {{2, 3, 7}, {5, 7}, {5}}, Linear},
      {"linear_batch0", {{0, 7}, {5, 7}, {5}}, Linear},
      {"linear_in0", {{4, 0}, {5, 0}, {5}}, Linear},
      {"linear_out0", {{4, 7}, {0, 7}, {0}}, Linear},
      // binary ops: same shape
      {"add_same", {B, B}, Add},
      {"sub_same", {B, B}, Sub},
      {"mul_same", {B, B}, Mul},
      {"div_same", {B, B}, Div, true},
      // scalar operand ([1], 0-d, double scalar); grads reduce with sum_to to one element
      {"add_scalar_1", {B, one}, Add},
      {"sub_scalar_0d_left", {s0, B}, Sub},
      {"mul_scalar_0d", {B, s0}, Mul},
      {"div_scalar_1_left", {one, B}, Div, true},
      {"add_double", {B}, [](const Inputs& x) { return add(x[0], -0.75); }},
      {"mul_double", {B}, [](const Inputs& x) { return mul(x[0], 1.25); }},
      // trailing row [N] and [1, N] against [B, N], on either side (bias-like sum_to)
      {"add_row", {B, row}, Add},
      {"sub_row_left", {row, B}, Sub},
      {"mul_row2", {B, row2}, Mul},
      {"div_row2_left", {row2, B}, Div, true},
      {"div_row", {B, row}, Div, true},
      {"add_trailing_3d", {{2, 3, 1}, {3, 1}}, Add},
      {"mul_trailing_3d_lead1", {{4, 1, 3}, {1, 3}}, Mul},
      {"add_zero_size", {{0, 5}, {5}}, Add},
      // not a fast path: the general broadcasting kernel and general sum_to
      {"add_outer", {{7, 1}, {1, 33}}, Add},
      {"mul_col", {{7, 1}, B}, Mul},
      {"sub_col_left", {B, {7, 1}}, Sub},
      {"div_3d", {{2, 1, 3}, {4, 1}}, Div, true},
      {"mul_interior", {{4, 1, 3}, {4, 2, 3}}, Mul},
      // fused cross-entropy
      {"cross_entropy_7x33", {B}, [](const Inputs& x) { return cross_entropy(x[0], targets(7, 33)); }},
      {"cross_entropy_128x10", {{128, 10}},
       [](const Inputs& x) { return cross_entropy(x[0], targets(128, 10)); }},
      {"cross_entropy_1x1", {{1, 1}}, [](const Inputs& x) { return cross_entropy(x[0], ints({0})); }},
      {"cross_entropy_ignore", {{5, 3}},
       [](const Inputs& x) { return cross_entropy(x[0], ints({0, 1, 1, 2, 1}), 1); }},
      {"cross_entropy_large_logits", {{16, 5}},
       [](const Inputs& x) { return cross_entropy(x[0], targets(16, 5)); }, false, 40.0},
      // a small MLP step: everything above composed
      {"mlp", {{32, 10}, {5, 10}, {5}, {2, 5}, {2}},
       [](const Inputs& x) {
         return cross_entropy(linear(relu(linear(x[0], x[1], x[2])), x[3], x[4]), targets(32, 2));
       }},
  };
}

// Output followed by the gradient of each input, for one dtype and kernel mode.
std::vector<Tensor> run(const Case& c, DType dtype, KernelMode mode) {
  KernelModeGuard guard(mode);
  Generator gen(77);
  Inputs in;
  for (const Shape& s : c.shapes) {
    Tensor t = randn(s, kFloat64, &gen);
    double* p = t.data_ptr<double>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      p[i] = c.positive ? std::abs(p[i]) + 0.5 : p[i] * c.scale;
    in.push_back(t.to(dtype).requires_grad_(true));
  }
  Tensor out = c.fn(in);
  Tensor w = randn(out.shape(), kFloat64, &gen).to(dtype);
  out.backward(w);
  std::vector<Tensor> result{out.detach()};
  for (auto& t : in) result.push_back(t.grad());
  return result;
}

// Tolerance. The reference kernels accumulate in double and round once; the fast float32 kernels
// (OpenBLAS SGEMM, float softmax) sum in float in another, blocked order. A float32 dot product
// computed in a different order differs by about u·√K·(size of its terms), u = 2^-24, and an
// element that cancels to near zero keeps that absolute error, so a pure relative tolerance is
// wrong for it (measured: 128x784x256 elements differ by up to 20% relative, 5e-5 absolute).
// Hence rtol 1e-5 plus atol = 1e-5 × the tensor's largest reference magnitude: the measured
// |fast - ref| / max|ref| is at most 7e-7 for K = 33..4096, a 14x margin, while any indexing or
// formula mistake shows up as an O(max|ref|) error. float64 uses the same rule with 1e-12.
// (AgreesWithReference, tests/support/tolerance.h.)

class KernelAgreement : public ::testing::TestWithParam<std::tuple<Case, DType>> {};

TEST_P(KernelAgreement, FastMatchesReference) {
  const auto& [c, dtype] = GetParam();
  auto fast = run(c, dtype, KernelMode::Fast);
  auto ref = run(c, dtype, KernelMode::Reference);
  ASSERT_EQ(fast.size(), ref.size());
  double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
  for (std::size_t i = 0; i < fast.size(); ++i) {
    ASSERT_EQ(fast[i].dtype(), dtype);
    EXPECT_TRUE(AgreesWithReference(fast[i], ref[i], tol)) << (i == 0 ? "output" : "grad of input ")
                                              << (i == 0 ? "" : std::to_string(i - 1));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllKernels, KernelAgreement, ::testing::Combine(::testing::ValuesIn(cases()),
                                                    ::testing::Values(kFloat32, kFloat64)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + to_string(std::get<1>(info.param));
    });

// The reference GEMM itself against a hand-computed product, in both modes (so agreement above
// is agreement with the right answer), including a transposed-layout backward.
TEST(KernelAgreementOracle, GemmMatchesHandComputation) {
  for (auto mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    std::vector<double> av{1, 2, 3, 4, 5, 6}, bv{1, -1, 2, 0, -2, 1};
    Tensor a = tensor(std::span<const double>(av), {2, 3}).requires_grad_(true);
    Tensor b = tensor(std::span<const double>(bv), {3, 2}).requires_grad_(true);
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{-1, 2, 2, 2}));
    sum(c).backward();
    // dL/da = 1 bᵀ: row sums of b; dL/db = aᵀ 1: column sums of a
    EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 2, -1, 0, 2, -1}));
    EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{5, 5, 7, 7, 9, 9}));
  }
}

TEST(KernelAgreementOracle, GuardRestoresMode) {
  EXPECT_EQ(ops::kernel_mode(), KernelMode::Fast);
  {
    KernelModeGuard g(KernelMode::Reference);
    EXPECT_EQ(ops::kernel_mode(), KernelMode::Reference);
  }
  EXPECT_EQ(ops::kernel_mode(), KernelMode::Fast);
}

}  // namespace
}  // namespace lockstep::testing
