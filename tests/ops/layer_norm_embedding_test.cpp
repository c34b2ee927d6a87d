// layer_norm and embedding (lockstep/ops/layer_norm.h, embedding.h) over the tables of
// layer_norm_embedding_cases.h:
//   - float64 central-difference gradient checks of every input (x, weight, bias; the weight);
//   - the reference kernels against the fast ones, float32 and float64, forward and every
//     gradient (embedding bit for bit: both add in index order; layer_norm to rounding: its row
//     sums run in another order);
//   - the fast kernels give the same bits on 1 and 2 intra-op threads, and embedding's weight
//     gradient the same bits on every run with repeated indices;
// the errors and PyTorch's numbers are in layer_norm_embedding_values_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "layer_norm_embedding_cases.h"
#include "support/gradcheck.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using ops::KernelMode;
using ops::KernelModeGuard;
using Inputs = std::vector<Tensor>;

// Inputs of a case: randn (float64 draws, seeded), the first scaled and shifted as the case asks.
Inputs make_inputs(const GptOpCase& c, DType dtype, std::uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    Tensor t = randn(c.shapes[i], kFloat64, &gen);
    if (i == 0 && (c.scale != 1.0 || c.shift != 0.0)) t = add(mul(t, c.scale), c.shift);
    in.push_back(t.to(dtype).requires_grad_(true));
  }
  return in;
}

// ---- float64 gradient check ------------------------------------------------------------------

class GptOpGradCheck : public ::testing::TestWithParam<GptOpCase> {};

TEST_P(GptOpGradCheck, AnalyticMatchesCentralDifferences) {
  const GptOpCase& c = GetParam();
  Inputs in = make_inputs(c, kFloat64, 2024);
  std::vector<Tensor*> leaves;
  for (Tensor& t : in) leaves.push_back(&t);
  Generator gen(7);
  EXPECT_TRUE(testing::gradcheck([&] { return c.fn(in); }, leaves, gen));
}

INSTANTIATE_TEST_SUITE_P(GptOps, GptOpGradCheck, ::testing::ValuesIn(all_gpt_op_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- reference vs fast kernels ---------------------------------------------------------------

// Output, then each input's gradient, for a seeded output gradient.
std::vector<Tensor> run(const GptOpCase& c, DType dtype, KernelMode mode) {
  KernelModeGuard guard(mode);
  Inputs in = make_inputs(c, dtype, 77);
  Tensor out = c.fn(in);
  Generator gen(78);
  out.backward(randn(out.shape(), kFloat64, &gen).to(dtype));
  std::vector<Tensor> result{out.detach()};
  for (auto& t : in) result.push_back(t.grad());
  return result;
}

// |fast − ref| ≤ tol·|ref| + tol·max|ref| (kernel_agreement_test.cpp's rule).
::testing::AssertionResult agree(const Tensor& fast, const Tensor& ref, double tol) {
  double mag = 0;
  for (double v : ref.to_vector<double>()) mag = std::max(mag, std::abs(v));
  return AllClose(fast, ref, tol, tol * std::max(mag, 1e-30));
}

class GptOpKernels : public ::testing::TestWithParam<std::tuple<GptOpCase, DType>> {};

TEST_P(GptOpKernels, FastMatchesReference) {
  const auto& [c, dtype] = GetParam();
  const auto fast = run(c, dtype, KernelMode::Fast);
  const auto ref = run(c, dtype, KernelMode::Reference);
  ASSERT_EQ(fast.size(), ref.size());
  for (std::size_t i = 0; i < fast.size(); ++i) {
    ASSERT_TRUE(fast[i].defined() && ref[i].defined()) << i;
    EXPECT_EQ(fast[i].dtype(), dtype);
    EXPECT_EQ(fast[i].shape(), ref[i].shape()) << "result " << i;
    if (c.bit_exact)
      EXPECT_TRUE(BitEqual(fast[i], ref[i])) << "result " << i;
    else
      EXPECT_TRUE(agree(fast[i], ref[i], dtype == kFloat32 ? 1e-5 : 1e-13)) << "result " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(GptOps, GptOpKernels,
                         ::testing::Combine(::testing::ValuesIn(all_gpt_op_cases()),
                                            ::testing::Values(kFloat32, kFloat64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// ---- thread counts and runs ------------------------------------------------------------------

// Inputs large enough for the fast kernels to split rows, columns and index ranges over the
// team: the bits do not depend on the thread count.
std::vector<GptOpCase> big_cases() {
  using gpt_cases_detail::cycle;
  using gpt_cases_detail::emb;
  using gpt_cases_detail::ln;
  return {
      ln("big", {8, 16, 600}, {600}, true, true),
      ln("big_no_bias", {64, 1030}, {1030}, true, false),
      emb("big", 100, 256, cycle(1000, 100), {10, 100}),
      emb("big_narrow_vocab", 7, 520, cycle(300, 7), {300}),
  };
}

TEST(GptOpThreads, FastKernelsGiveTheSameBitsOnOneAndTwoThreads) {
  const int saved = get_num_threads();
  for (const auto& c : big_cases())
    for (DType dtype : {kFloat32, kFloat64}) {
      set_num_threads(1);
      const auto one = run(c, dtype, KernelMode::Fast);
      set_num_threads(2);
      const auto two = run(c, dtype, KernelMode::Fast);
      for (std::size_t i = 0; i < one.size(); ++i)
        EXPECT_TRUE(BitEqual(one[i], two[i])) << c.name << " result " << i;
    }
  set_num_threads(saved);
}

// Embedding's big cases: the fast kernel equals the reference bit for bit on 2 threads too.
TEST(GptOpThreads, EmbeddingFastEqualsReferenceOnTwoThreads) {
  const int saved = get_num_threads();
  set_num_threads(2);
  for (const auto& c : big_cases()) {
    if (!c.bit_exact) continue;
    const auto fast = run(c, kFloat32, KernelMode::Fast);
    const auto ref = run(c, kFloat32, KernelMode::Reference);
    for (std::size_t i = 0; i < fast.size(); ++i)
      EXPECT_TRUE(BitEqual(fast[i], ref[i])) << c.name << " result " << i;
  }
  set_num_threads(saved);
}

// Repeated tokens: the weight gradient is the sum in index order, the same bits every run —
// and exactly the sequential float32 sum of the rows (not, say, a pairwise or double sum).
TEST(GptOpThreads, EmbeddingGradientIsTheIndexOrderSum) {
  const std::int64_t count = 50, dim = 4;
  std::vector<std::int64_t> idx(count, 1);  // every position looks up row 1
  idx[7] = 0;
  const Tensor index = tensor(std::span<const std::int64_t>(idx));
  Generator gen(3);
  const Tensor gy = mul(randn({count, dim}, kFloat32, &gen), 1e3);
  std::vector<float> expect(static_cast<std::size_t>(dim), 0.0f);
  const auto g = gy.to_vector<float>();
  for (std::int64_t i = 0; i < count; ++i)
    if (idx[i] == 1)
      for (std::int64_t j = 0; j < dim; ++j) expect[j] += g[i * dim + j];
  Tensor first;
  for (int run_i = 0; run_i < 3; ++run_i) {
    Tensor w = zeros({3, dim}).requires_grad_(true);
    embedding(w, index).backward(gy);
    const Tensor row1 = narrow(w.grad(), 0, 1, 1).reshape({dim});
    EXPECT_TRUE(BitEqual(row1, tensor(std::span<const float>(expect))));
    if (run_i == 0) first = w.grad();
    EXPECT_TRUE(BitEqual(w.grad(), first));
    EXPECT_EQ(narrow(w.grad(), 0, 2, 1).to_vector<float>(), std::vector<float>(dim, 0.0f));
  }
}

}  // namespace
}  // namespace lockstep::testing
