// Central finite-difference gradient check of every differentiable op in ops.h, in float64, on
// odd shapes (1, 7, 33), zero-size dimensions and broadcasting cases. For an op f and fixed
// random weights W, L = sum(f(inputs) * W); the analytic gradient from backward() is compared
// with (L(x + eps) - L(x - eps)) / (2 eps) for every input element, eps = 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "lockstep/ops/loss.h"
#include "support/gradcheck.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

// Input distributions: Positive for log/sqrt/pow/div denominators, AwayFromZero (|x| >= 0.1) so
// that eps never crosses relu's kink.
enum class Init { Normal, Positive, AwayFromZero };

struct Case {
  std::string name;
  std::vector<Shape> shapes;
  Fn fn;
  Init init = Init::Normal;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Tensor ints(std::vector<std::int64_t> v) { return tensor(std::span<const std::int64_t>(v)); }

std::vector<Case> cases() {
  const Shape S0{}, S1{1}, S7{7}, S33{33}, S7x33{7, 33}, S7x1{7, 1}, S1x33{1, 33}, S0x5{0, 5},
      S5{5};
  const auto P = Init::Positive, AZ = Init::AwayFromZero;
  std::vector<Case> c = {
      // elementwise binary ops with broadcasting (fast paths and the general path)
      {"add_same", {S7x33, S7x33}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"add_row", {S7x33, S33}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"add_row_left", {S33, S7x33}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"add_1_7", {S1, S7}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"add_0d_7", {S0, S7}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"add_0d_0d", {S0, S0}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"add_zero_size", {S0x5, S5}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"add_general", {{2, 1, 3}, {4, 1}}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {"sub_row", {S7x33, S1x33}, [](const Inputs& x) { return sub(x[0], x[1]); }},
      {"sub_col", {S7x1, S7x33}, [](const Inputs& x) { return sub(x[0], x[1]); }},
      {"mul_outer", {S7x1, S1x33}, [](const Inputs& x) { return mul(x[0], x[1]); }},
      {"mul_same", {S7x33, S7x33}, [](const Inputs& x) { return mul(x[0], x[1]); }},
      {"mul_0d", {S0, S7x33}, [](const Inputs& x) { return mul(x[0], x[1]); }},
      {"mul_zero_size", {S0x5, S0x5}, [](const Inputs& x) { return mul(x[0], x[1]); }},
      {"div_col", {S7x33, S7x1}, [](const Inputs& x) { return div(x[0], x[1]); }, P},
      {"div_row_left", {S33, S7x33}, [](const Inputs& x) { return div(x[0], x[1]); }, P},
      {"div_same", {{3, 5}, {3, 5}}, [](const Inputs& x) { return div(x[0], x[1]); }, P},
      {"add_scalar", {S7x33}, [](const Inputs& x) { return add(x[0], 2.5); }},
      {"mul_scalar", {S1}, [](const Inputs& x) { return mul(x[0], -1.5); }},
      {"mul_scalar_zero_size", {S0x5}, [](const Inputs& x) { return mul(x[0], 3.0); }},
      {"pow_3", {{7, 5}}, [](const Inputs& x) { return pow(x[0], 3.0); }},
      {"pow_half", {{7, 5}}, [](const Inputs& x) { return pow(x[0], 0.5); }, P},
      {"pow_neg", {S33}, [](const Inputs& x) { return pow(x[0], -1.5); }, P},
      {"pow_2_0d", {S0}, [](const Inputs& x) { return pow(x[0], 2.0); }},
      // unary
      {"neg", {S7x33}, [](const Inputs& x) { return neg(x[0]); }},
      {"exp", {S7x33}, [](const Inputs& x) { return exp(x[0]); }},
      {"exp_zero_size", {S0x5}, [](const Inputs& x) { return exp(x[0]); }},
      {"log", {S7x33}, [](const Inputs& x) { return log(x[0]); }, P},
      {"sqrt", {S7x33}, [](const Inputs& x) { return sqrt(x[0]); }, P},
      {"relu", {S7x33}, [](const Inputs& x) { return relu(x[0]); }, AZ},
      {"tanh", {S7x33}, [](const Inputs& x) { return tanh(x[0]); }},
      {"sigmoid", {S7x33}, [](const Inputs& x) { return sigmoid(x[0]); }},
      {"gelu", {S7x33}, [](const Inputs& x) { return gelu(x[0]); }},
      {"gelu_1", {S1}, [](const Inputs& x) { return gelu(x[0]); }},
      // linear algebra
      {"matmul", {{7, 33}, {33, 5}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul_1x1x1", {{1, 1}, {1, 1}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul_vecs", {{1, 7}, {7, 1}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul_m0", {{0, 5}, {5, 3}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul_k0", {{3, 0}, {0, 4}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"matmul_n0", {{4, 5}, {5, 0}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {"linear_bias", {{7, 33}, {5, 33}, S5},
       [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {"linear_nobias", {{7, 33}, {5, 33}}, [](const Inputs& x) { return linear(x[0], x[1]); }},
      {"linear_1d", {S33, {5, 33}, S5}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {"linear_3d", {{2, 3, 7}, {5, 7}, S5},
       [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {"linear_3d_nobias", {{2, 3, 7}, {5, 7}}, [](const Inputs& x) { return linear(x[0], x[1]); }},
      {"linear_zero_batch", {{0, 7}, {5, 7}, S5},
       [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      // reductions and softmax
      {"sum", {S7x33}, [](const Inputs& x) { return sum(x[0]); }},
      {"sum_zero_size", {S0x5}, [](const Inputs& x) { return sum(x[0]); }},
      {"sum_dim0", {S7x33}, [](const Inputs& x) { return sum(x[0], 0); }},
      {"sum_dim1_keepdim", {S7x33}, [](const Inputs& x) { return sum(x[0], 1, true); }},
      {"sum_dim_last_3d", {{2, 3, 5}}, [](const Inputs& x) { return sum(x[0], -1); }},
      {"sum_dim0_zero_size", {S0x5}, [](const Inputs& x) { return sum(x[0], 0); }},
      {"mean", {S7x33}, [](const Inputs& x) { return mean(x[0]); }},
      {"mean_dim1", {S7x33}, [](const Inputs& x) { return mean(x[0], 1); }},
      {"mean_dim1_3d_keepdim", {{2, 3, 5}}, [](const Inputs& x) { return mean(x[0], 1, true); }},
      {"max_all", {S7x33}, [](const Inputs& x) { return max(x[0]); }},
      {"max_dim1", {S7x33}, [](const Inputs& x) { return max(x[0], 1).first; }},
      {"max_dim1_3d_keepdim", {{2, 3, 5}}, [](const Inputs& x) { return max(x[0], 1, true).first; }},
      {"log_softmax", {S7x33}, [](const Inputs& x) { return log_softmax(x[0]); }},
      {"log_softmax_dim0", {{7, 5}}, [](const Inputs& x) { return log_softmax(x[0], 0); }},
      {"log_softmax_1x1", {{1, 1}}, [](const Inputs& x) { return log_softmax(x[0]); }},
      {"softmax", {S7x33}, [](const Inputs& x) { return softmax(x[0]); }},
      {"softmax_dim0", {{7, 5}}, [](const Inputs& x) { return softmax(x[0], 0); }},
      {"log_softmax_zero_rows", {S0x5}, [](const Inputs& x) { return log_softmax(x[0]); }},
      {"max_dim1_zero_rows", {S0x5}, [](const Inputs& x) { return max(x[0], 1).first; }},
      {"relu_zero_size", {S0x5}, [](const Inputs& x) { return relu(x[0]); }},
      // shape and indexing
      {"reshape", {S7x33}, [](const Inputs& x) { return reshape(x[0], {33, -1}); }},
      {"t", {S7x33}, [](const Inputs& x) { return t(x[0]); }},
      {"narrow_dim0", {S7x33}, [](const Inputs& x) { return narrow(x[0], 0, 2, 3); }},
      {"narrow_dim1", {S7x33}, [](const Inputs& x) { return narrow(x[0], 1, 5, 20); }},
      {"narrow_dim1_3d", {{2, 3, 5}}, [](const Inputs& x) { return narrow(x[0], 1, 1, 2); }},
      {"index_select_dim0", {{3, 5}},
       [](const Inputs& x) { return index_select(x[0], 0, ints({2, 0, 2, 1})); }},
      {"index_select_dim1", {{4, 7}},
       [](const Inputs& x) { return index_select(x[0], 1, ints({6, 6, 0})); }},
      {"index_select_empty", {{3, 5}}, [](const Inputs& x) { return index_select(x[0], 0, ints({})); }},
      {"narrow_empty", {S7x33}, [](const Inputs& x) { return narrow(x[0], 0, 7, 0); }},
      {"cat_dim0", {{3, 4}, {2, 4}, {0, 4}}, [](const Inputs& x) { return cat(x, 0); }},
      {"cat_dim1", {{3, 2}, {3, 5}}, [](const Inputs& x) { return cat(x, 1); }},
      {"tensor_split_pieces", {{9, 3}},
       [](const Inputs& x) {
         auto p = tensor_split(x[0], 4);  // 3, 2, 2, 2 rows
         return cat({mul(p[0], 2.0), p[1], exp(p[2]), mul(p[3], p[3])}, 0);
       }},
      {"tensor_split_empty_piece", {{3, 2}},
       [](const Inputs& x) {
         auto p = tensor_split(x[0], 4);  // 1, 1, 1, 0 rows
         return cat({p[3], mul(p[0], 3.0), p[2], p[1]}, 0);
       }},
      // losses and dropout
      {"cross_entropy", {{5, 3}},
       [](const Inputs& x) { return cross_entropy(x[0], ints({0, 2, 1, 2, 0})); }},
      {"cross_entropy_33", {S7x33},
       [](const Inputs& x) { return cross_entropy(x[0], ints({32, 0, 5, 17, 17, 1, 31})); }},
      {"cross_entropy_1row", {{1, 7}}, [](const Inputs& x) { return cross_entropy(x[0], ints({4})); }},
      {"cross_entropy_ignore_index", {{5, 3}},
       [](const Inputs& x) { return cross_entropy(x[0], ints({0, 1, 1, 2, 1}), 1); }},
      {"cross_entropy_ignore_default", {{4, 3}},
       [](const Inputs& x) { return cross_entropy(x[0], ints({2, -100, 0, -100})); }},
      {"cross_entropy_zero_rows", {{0, 3}},
       [](const Inputs& x) { return cross_entropy(x[0], ints({})); }},
      {"mse_loss", {S7x33, S7x33}, [](const Inputs& x) { return mse_loss(x[0], x[1]); }},
      {"mse_loss_1", {S1, S1}, [](const Inputs& x) { return mse_loss(x[0], x[1]); }},
      {"dropout", {S7x33},
       [](const Inputs& x) {
         Generator g(99);  // the same mask on every evaluation
         return dropout(x[0], 0.3, true, &g);
       }},
      {"dropout_eval", {S7x33}, [](const Inputs& x) { return dropout(x[0], 0.3, false); }},
      // selection (src/ops/mask.cpp, topk.cpp)
      {"tril_batched", {{2, 4, 3}}, [](const Inputs& x) { return tril(x[0], 0); }},
      {"triu_above", {{4, 5}}, [](const Inputs& x) { return triu(x[0], 1); }},
      {"masked_fill_broadcast", {{3, 4}},
       [](const Inputs& x) { return masked_fill(x[0], ints({1, 0, 0, 1}), -2.0); }},
      {"masked_fill_mask_wider", {{4}},
       [](const Inputs& x) { return masked_fill(x[0], tensor(std::span<const std::int64_t>(
           std::vector<std::int64_t>{1, 0, 0, 1, 0, 1, 1, 0}), {2, 4}), 0.5); }},
      {"where_broadcast", {{3, 1}, {4}},
       [](const Inputs& x) { return where(ints({0, 1, 1, 0}), x[0], x[1]); }},
      {"topk_dim1", {{3, 6}}, [](const Inputs& x) { return topk(x[0], 2, 1).first; }},
      {"topk_smallest_dim0", {{5, 2}},
       [](const Inputs& x) { return topk(x[0], 3, 0, /*largest=*/false).first; }},
      // losses with a reduction (lockstep/ops/loss.h); row 1's target is ignored
      {"nll_loss_mean", {{4, 3}},
       [](const Inputs& x) { return nll_loss(x[0], ints({2, -100, 0, 1})); }},
      {"nll_loss_sum", {{4, 3}},
       [](const Inputs& x) { return nll_loss(x[0], ints({2, -100, 0, 1}), -100, Reduction::Sum); }},
      {"nll_loss_none", {{4, 3}},
       [](const Inputs& x) { return nll_loss(x[0], ints({2, -100, 0, 1}), -100, Reduction::None); }},
      {"cross_entropy_none", {{4, 3}},
       [](const Inputs& x) { return cross_entropy(x[0], ints({2, 1, 0, 1}), -100, Reduction::None); }},
      {"mse_loss_sum", {{3, 2}, {3, 2}},
       [](const Inputs& x) { return mse_loss(x[0], x[1], Reduction::Sum); }},
      // a composite: a 2-layer MLP with its loss
      {"mlp_cross_entropy", {{7, 5}, {4, 5}, {4}, {3, 4}, {3}},
       [](const Inputs& x) {
         return cross_entropy(linear(tanh(linear(x[0], x[1], x[2])), x[3], x[4]),
                              ints({0, 2, 1, 1, 0, 2, 2}));
       }},
  };
  return c;
}

Tensor make_input(const Shape& s, Init init, Generator& gen) {
  Tensor t = randn(s, kFloat64, &gen);
  double* p = t.data_ptr<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (init == Init::Positive) p[i] = std::abs(p[i]) + 0.5;
    if (init == Init::AwayFromZero) p[i] = std::copysign(std::abs(p[i]) + 0.1, p[i]);
  }
  return t.requires_grad_(true);
}

::testing::AssertionResult gradcheck(const Case& c) {
  Generator gen(2024);
  Inputs in;
  for (const Shape& s : c.shapes) in.push_back(make_input(s, c.init, gen));
  std::vector<Tensor*> leaves;
  for (Tensor& t : in) leaves.push_back(&t);
  return testing::gradcheck([&] { return c.fn(in); }, leaves, gen);
}

class GradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheck, AnalyticMatchesCentralDifferences) { EXPECT_TRUE(gradcheck(GetParam())); }

INSTANTIATE_TEST_SUITE_P(AllOps, GradCheck, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The checker itself can fail: an op whose recorded backward is off by a factor is caught, and so
// is one that records no history.
TEST(GradCheckHarness, DetectsWrongGradients) {
  Case wrong{"wrong", {{3, 4}}, [](const Inputs& x) {
               Tensor out;
               {
                 NoGradGuard g;
                 out = mul(x[0], 3.0);
               }
               autograd::record("WrongBackward", out, {&x[0]}, [](const Tensor& g) {
                 return std::vector<Tensor>{mul(g, 2.9)};
               });
               return out;
             }};
  EXPECT_FALSE(gradcheck(wrong));
  Case detached{"detached", {{3}}, [](const Inputs& x) { return x[0].detach(); }};
  EXPECT_FALSE(gradcheck(detached));
}

// Gradients of the per-piece tensors of tensor_split flow back to the right rows of the input.
TEST(GradCheckExtra, TensorSplitPiecesRouteGradients) {
  std::vector<double> v(9 * 2);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  Tensor x = tensor(std::span<const double>(v), {9, 2}).requires_grad_(true);
  auto p = tensor_split(x, 4);
  sum(mul(p[2], 5.0)).backward();  // rows 5..6 only
  std::vector<double> expected(18, 0.0);
  for (int i = 10; i < 14; ++i) expected[i] = 5.0;
  EXPECT_EQ(x.grad().to_vector<double>(), expected);
}

}  // namespace
}  // namespace lockstep::testing
