// The comparisons (eq, ne, lt, le, gt, ge), tril/triu, masked_fill, where, topk and multinomial
// against torch's values (each case's expected numbers are what torch 2.15 prints for the same
// call, with bool results as 0/1), and their bad input. Gradients: gradcheck_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

using I = std::vector<std::int64_t>;
using D = std::vector<double>;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor f32(D v, Shape s) { return tensor(std::span<const double>(v), s).to(kFloat32); }
Tensor i64(I v, Shape s) { return tensor(std::span<const std::int64_t>(v), s); }

TEST(Compare, AllSixWithNanAndBroadcasting) {
  // torch: a = [[1, nan, 3]], b = [[3], [1]] -> a < b etc., broadcast to [2, 3].
  const Tensor a = f32({1, kNan, 3}, {1, 3}), b = f32({3, 1}, {2, 1});
  EXPECT_EQ(eq(a, b).to_vector<std::int64_t>(), (I{0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(ne(a, b).to_vector<std::int64_t>(), (I{1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(lt(a, b).to_vector<std::int64_t>(), (I{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(le(a, b).to_vector<std::int64_t>(), (I{1, 0, 1, 1, 0, 0}));
  EXPECT_EQ(gt(a, b).to_vector<std::int64_t>(), (I{0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(ge(a, b).to_vector<std::int64_t>(), (I{0, 0, 1, 1, 0, 1}));
  EXPECT_EQ(lt(a, b).dtype(), kInt64);
  EXPECT_EQ(gt(i64({5, -2}, {2}), i64({0}, {1})).to_vector<std::int64_t>(), (I{1, 0}));
  expect_error<DTypeError>([&] { lt(a, i64({1}, {1})); }, {"lt", "same dtype"});
  expect_error<ShapeError>([&] { ge(a, f32({1, 2}, {2})); }, {"[1, 3]", "[2]"});
}

TEST(Triangle, TrilTriuAsTorch) {
  // torch.arange(1, 13.).view(3, 4): tril(diagonal=1), triu(diagonal=-1), batched tril.
  const Tensor a = arange(12, TensorOptions(kFloat32)).reshape({3, 4});
  EXPECT_EQ(tril(a, 1).to_vector<float>(),
            (std::vector<float>{0, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11}));
  EXPECT_EQ(triu(a, -1).to_vector<float>(),
            (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11}));
  EXPECT_EQ(tril(ones({2, 2, 2}, TensorOptions(kInt64))).to_vector<std::int64_t>(),
            (I{1, 0, 1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(tril(a, -5).to_vector<float>(), std::vector<float>(12, 0.0f));
  expect_error<ShapeError>([] { tril(ones({3})); }, {"tril", "at least 2 dimensions", "[3]"});
}

TEST(MaskedFill, BroadcastMaskIntAndFloatMasks) {
  const Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(masked_fill(a, i64({0, 1, 0}, {3}), -kInf).to_vector<float>(),
            (std::vector<float>{1, -INFINITY, 3, 4, -INFINITY, 6}));
  EXPECT_EQ(masked_fill(a, f32({1, 0}, {2, 1}), 0.5).to_vector<float>(),
            (std::vector<float>{0.5, 0.5, 0.5, 4, 5, 6}));
  // nanoGPT's manual attention: att.masked_fill(tril(ones(T, T)) == 0, -inf)
  const Tensor att = zeros({2, 2});
  const Tensor causal = eq(tril(ones({2, 2})), zeros({}));
  EXPECT_EQ(masked_fill(att, causal, -kInf).to_vector<float>(),
            (std::vector<float>{0, -INFINITY, 0, 0}));
  EXPECT_EQ(masked_fill(i64({1, 2}, {2}), i64({1, 0}, {2}), 7.0).to_vector<std::int64_t>(), (I{7, 2}));
  expect_error<ValueError>([] { masked_fill(i64({1}, {1}), i64({1}, {1}), kInf); }, {"int64"});
  expect_error<ShapeError>([&] { masked_fill(a, i64({1, 0}, {2}), 0.0); },
                           {"masked_fill", "[2, 3]", "[2]"});
}

TEST(Where, PicksAndBroadcasts) {
  const Tensor c = i64({1, 0, 1}, {3});
  EXPECT_EQ(where(c, f32({1, 2, 3}, {3}), f32({-1}, {1})).to_vector<float>(),
            (std::vector<float>{1, -1, 3}));
  EXPECT_EQ(where(f32({0, 2}, {2, 1}), i64({5}, {1}), i64({6, 7}, {2})).to_vector<std::int64_t>(),
            (I{6, 7, 5, 5}));
  expect_error<DTypeError>([&] { where(c, f32({1}, {1}), i64({1}, {1})); }, {"where"});
}

TEST(Topk, ValuesIndicesNanAndTies) {
  // torch.topk(tensor([[1., 3, 3, nan, 0]]), 3) -> values [nan, 3, 3], indices [3, 1, 2].
  auto [v, i] = topk(f32({1, 3, 3, kNan, 0}, {1, 5}), 3);
  const auto vv = v.to_vector<float>();
  EXPECT_TRUE(std::isnan(vv[0]));
  EXPECT_EQ(vv[1], 3.0f);
  EXPECT_EQ(vv[2], 3.0f);
  EXPECT_EQ(i.to_vector<std::int64_t>(), (I{3, 1, 2}));
  EXPECT_EQ(v.shape(), (Shape{1, 3}));
  // along dim 0, smallest: torch.topk(t, 2, dim=0, largest=False)
  auto [s, si] = topk(f32({4, 1, 2, 5, 0, 3}, {3, 2}), 2, 0, false);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(si.to_vector<std::int64_t>(), (I{2, 0, 1, 2}));
  EXPECT_EQ(topk(i64({2, 9, 4}, {3}), 1).second.to_vector<std::int64_t>(), (I{1}));
  expect_error<ValueError>([] { topk(ones({2, 3}), 4); }, {"topk", "k (4)", "size 3"});
  expect_error<IndexError>([] { topk(ones({2, 3}), 1, 2); }, {"topk", "dimension 2"});
}

TEST(Multinomial, DrawsFollowTheWeights) {
  Generator g(7);
  // One-hot rows always give their index; without replacement every index once.
  EXPECT_EQ(multinomial(f32({0, 0, 1, 0, 1, 0}, {2, 3}), 2, true, &g).to_vector<std::int64_t>(),
            (I{2, 2, 1, 1}));
  const auto perm = multinomial(f32({1, 2, 3, 4}, {4}), 4, false, &g).to_vector<std::int64_t>();
  EXPECT_EQ(std::set<std::int64_t>(perm.begin(), perm.end()), (std::set<std::int64_t>{0, 1, 2, 3}));
  // Frequencies of 40000 draws from weights 1:3:0:4 (not normalised) within 4 standard errors.
  const auto draws = multinomial(f32({1, 3, 0, 4}, {4}), 40000, true, &g).to_vector<std::int64_t>();
  std::vector<double> count(4);
  for (auto d : draws) count[static_cast<std::size_t>(d)] += 1;
  const D p{1 / 8.0, 3 / 8.0, 0, 4 / 8.0};
  for (std::size_t k = 0; k < 4; ++k)
    EXPECT_NEAR(count[k] / 40000, p[k], 4 * std::sqrt(p[k] * (1 - p[k]) / 40000) + 1e-12) << k;
  // Fewer positive weights than samples without replacement: the zeros come after, in order.
  EXPECT_EQ(multinomial(f32({0, 1, 0}, {3}), 3, false, &g).to_vector<std::int64_t>(), (I{1, 0, 2}));
}

TEST(Multinomial, BadInputAsTorch) {
  expect_error<DTypeError>([] { multinomial(i64({1, 2}, {2}), 1); }, {"floating-point"});
  expect_error<ShapeError>([] { multinomial(ones({1, 2, 2}), 1); }, {"1 or 2 dim"});
  expect_error<ValueError>([] { multinomial(ones({3}), 0); }, {"n_sample <= 0"});
  expect_error<ValueError>([] { multinomial(ones({3}), 4, false); }, {"without replacement"});
  expect_error<ValueError>([] { multinomial(f32({1, -1}, {2}), 1); }, {"element < 0"});
  expect_error<ValueError>([] { multinomial(f32({1, kNan}, {2}), 1); }, {"`nan`"});
  expect_error<ValueError>([] { multinomial(zeros({2, 3}), 1); }, {"sum of probabilities <= 0"});
}

}  // namespace
}  // namespace lockstep::testing
