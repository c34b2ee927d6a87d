// Values of the attention ops (issue 19; cases in attention_cases.h): permute and split as
// torch, batched matmul equal to the 2-d one per batch (also under autocast), bits independent
// of the intra-op thread count, causal rows, dropout on the weights; PyTorch's numbers
// (tests/data/attention/make_attention_golden.py); every refused input with its message.
#include <gtest/gtest.h>

#include "attention_cases.h"

namespace lockstep::testing {
namespace {

// ---- values -------------------------------------------------------------------------------------

Tensor arange_tensor(const Shape& s) {
  std::vector<double> v(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return reshape(tensor(std::span<const double>(v)), s);
}

TEST(AttentionOpsValues, PermuteMovesEveryElement) {
  const Tensor a = arange_tensor({2, 3, 4, 5});
  const Tensor p = permute(a, {0, 2, 1, 3});
  ASSERT_EQ(p.shape(), Shape({2, 4, 3, 5}));
  const auto v = p.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        for (int l = 0; l < 5; ++l)
          EXPECT_EQ(v[static_cast<std::size_t>(((i * 4 + j) * 3 + k) * 5 + l)],
                    ((i * 3 + k) * 4 + j) * 5 + l);
  // transpose is permute with two dims swapped; int64 moves as 8-byte words, float32 as 4.
  EXPECT_TRUE(BitEqual(transpose(a, -3, 2), p));
  const Tensor f = transpose(a.to(kFloat32), 1, 2);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_TRUE(BitEqual(f.to(kFloat64), p));
  EXPECT_EQ(transpose(a.to(kInt64), 1, 2).to_vector<std::int64_t>(),
            p.to(kInt64).to_vector<std::int64_t>());
  EXPECT_TRUE(BitEqual(t(reshape(a, {6, 20})), transpose(reshape(a, {6, 20}), 0, 1)));
}

TEST(AttentionOpsValues, SplitAsTorch) {
  const Tensor a = arange_tensor({7, 3});
  auto p = split(a, 3, 0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].shape(), Shape({3, 3}));
  EXPECT_EQ(p[2].shape(), Shape({1, 3}));
  EXPECT_EQ(p[2].to_vector<double>(), (std::vector<double>{18, 19, 20}));
  auto q = split(a, 2, -1);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[1].shape(), Shape({7, 1}));
  EXPECT_EQ(q[1].to_vector<double>()[6], 20);
  EXPECT_EQ(split(a, 10, 0).size(), 1u);
  // an empty dimension: one empty piece, for any split_size (0 included, as torch)
  auto e = split(zeros({0, 3}), 0, 0);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].shape(), Shape({0, 3}));
  // nanoGPT's q, k, v = c_attn(x).split(n_embd, dim=2)
  auto qkv = split(arange_tensor({2, 5, 12}), 4, 2);
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(qkv[2].shape(), Shape({2, 5, 4}));
  EXPECT_EQ(qkv[2].to_vector<double>()[0], 8);
  // chunk is split with ceil(n / chunks)
  EXPECT_EQ(chunk(a, 3, 0).size(), 3u);
  EXPECT_EQ(chunk(a, 3, 0)[2].shape(), Shape({1, 3}));
}

TEST(AttentionOpsValues, BatchedMatmulEqualsTwoDimensionalPerBatch) {
  Generator gen(3);
  const Tensor a = randn({3, 2, 9, 7}, kFloat32, &gen), b = randn({3, 2, 7, 5}, kFloat32, &gen);
  const Tensor w = randn({7, 5}, kFloat32, &gen);
  const Tensor c = matmul(a, b), cw = matmul(a, w);
  ASSERT_EQ(c.shape(), Shape({3, 2, 9, 5}));
  const Tensor a3 = reshape(a, {6, 9, 7}), b3 = reshape(b, {6, 7, 5});
  for (std::int64_t i = 0; i < 6; ++i) {
    const Tensor ai = reshape(narrow(a3, 0, i, 1), {9, 7}),
                 bi = reshape(narrow(b3, 0, i, 1), {7, 5});
    EXPECT_TRUE(BitEqual(reshape(narrow(reshape(c, {6, 9, 5}), 0, i, 1), {9, 5}), matmul(ai, bi)));
    EXPECT_TRUE(BitEqual(reshape(narrow(reshape(cw, {6, 9, 5}), 0, i, 1), {9, 5}), matmul(ai, w)));
  }
}

// Under autocast each batch index is autocast's bf16 GEMM (operands and result rounded to bf16),
// bit for bit the 2-d matmul of its matrices, in both directions; attention takes the
// composition (its matmuls in bf16).
TEST(AttentionOpsValues, BatchedMatmulUnderAutocastIsTheTwoDimensionalOnePerBatch) {
  Generator gen(9);
  Tensor a = randn({3, 5, 7}, kFloat32, &gen).requires_grad_(true);
  Tensor b = randn({3, 7, 4}, kFloat32, &gen).requires_grad_(true);
  const Tensor g = randn({3, 5, 4}, kFloat32, &gen);
  Tensor c;
  {
    AutocastGuard region;
    c = matmul(a, b);
  }
  c.backward(g);
  for (std::int64_t i = 0; i < 3; ++i) {
    auto slice = [i](const Tensor& t) {
      return reshape(narrow(t, 0, i, 1), {t.size(1), t.size(2)}).detach().requires_grad_(true);
    };
    Tensor ai = slice(a), bi = slice(b), ci;
    {
      AutocastGuard region;
      ci = matmul(ai, bi);
    }
    ci.backward(reshape(narrow(g, 0, i, 1), {5, 4}));
    EXPECT_TRUE(BitEqual(reshape(narrow(c, 0, i, 1), {5, 4}).detach(), ci.detach())) << i;
    EXPECT_TRUE(BitEqual(reshape(narrow(a.grad(), 0, i, 1), {5, 7}), ai.grad())) << i;
    EXPECT_TRUE(BitEqual(reshape(narrow(b.grad(), 0, i, 1), {7, 4}), bi.grad())) << i;
  }
  AutocastGuard region;
  const Tensor q = randn({1, 2, 4, 8}, kFloat32, &gen);
  const double scale = 1 / std::sqrt(8.0);
  const Tensor composed = matmul(softmax(mul(matmul(q, transpose(q, -2, -1)), scale), -1), q);
  EXPECT_TRUE(BitEqual(scaled_dot_product_attention(q, q, q), composed));
}

// Each batch index's GEMM (and each attention slice) runs on one thread, whichever task of the
// team: forward and all gradients have the same bits for 1 to 4 intra-op threads (shapes above
// the split threshold, batches that do not divide evenly).
TEST(AttentionOpsValues, BitsDoNotDependOnThreads) {
  const int saved = get_num_threads();
  const std::vector<Case> runs_of = {
      {"bmm", {{7, 96, 80}, {7, 80, 72}}, Matmul},
      {"bmm_b_2d", {{2, 3, 65, 33}, {33, 70}}, Matmul},
      {"bmm_a_2d", {{64, 40}, {5, 40, 64}}, Matmul},
      {"sdpa_causal", {{3, 5, 64, 16}, {3, 5, 64, 16}, {3, 5, 64, 16}}, SdpaCausal},
  };
  for (const Case& c : runs_of) {
    std::vector<std::vector<Tensor>> runs;
    for (int threads : {1, 2, 3, 4}) {
      set_num_threads(threads);
      runs.push_back(run(c, kFloat32, KernelMode::Fast));
    }
    for (std::size_t r = 1; r < runs.size(); ++r)
      for (std::size_t i = 0; i < runs[0].size(); ++i)
        EXPECT_TRUE(BitEqual(runs[r][i], runs[0][i]))
            << c.name << ": tensor " << i << ", " << r + 1 << " threads";
  }
  set_num_threads(saved);
}

TEST(AttentionOpsValues, CausalRowsSeeOnlyEarlierKeys) {
  for (KernelMode mode : {KernelMode::Fast, KernelMode::Reference}) {
    KernelModeGuard guard(mode);
    Generator gen(5);
    const Tensor q = randn({1, 2, 6, 3}, kFloat64, &gen), k = randn({1, 2, 6, 3}, kFloat64, &gen);
    Tensor v = randn({1, 2, 6, 3}, kFloat64, &gen);
    const auto before = scaled_dot_product_attention(q, k, v, true).to_vector<double>();
    v.data_ptr<double>()[5 * 3] += 100;  // value 5 of head 0, component 0
    const auto after = scaled_dot_product_attention(q, k, v, true).to_vector<double>();
    for (std::size_t i = 0; i < before.size(); ++i) {
      if (i == 5 * 3)  // only query 5 attends key 5
        EXPECT_NE(after[i], before[i]) << i;
      else
        EXPECT_EQ(after[i], before[i]) << i;
    }
  }
}

TEST(AttentionOpsValues, DropoutDropsAttentionWeights) {
  Generator gen(5);
  const Tensor q = randn({2, 2, 4, 3}, kFloat32, &gen), k = randn({2, 2, 4, 3}, kFloat32, &gen),
               v = randn({2, 2, 4, 3}, kFloat32, &gen);
  for (double e : scaled_dot_product_attention(q, k, v, true, 1.0).to_vector<double>())
    EXPECT_EQ(e, 0);
  // p = 0.5 under one dropout key: the same mask each time (keyed by sample, as ops' dropout),
  // and not the undropped result.
  auto dropped = [&] {
    DropoutKeyGuard key(DropoutKey{42, 3, 0});
    return scaled_dot_product_attention(q, k, v, true, 0.5);
  };
  EXPECT_TRUE(BitEqual(dropped(), dropped()));
  EXPECT_FALSE(BitEqual(dropped(), scaled_dot_product_attention(q, k, v, true)));
}

// ---- PyTorch's numbers
// ----------------------------------------------------------------------------

const nlohmann::json& golden() {
  static const nlohmann::json j = read_json_data("attention/attention_golden.json");
  return j;
}

// float64 against PyTorch's float64 (its CPU kernel sums in another order: a few ulp); float32
// inputs against the same float64 numbers with the suite's float32 rule.
TEST(AttentionGolden, ScaledDotProductAttentionMatchesPyTorch) {
  ASSERT_GE(golden().at("attention").size(), 8u);
  for (const auto& c : golden().at("attention")) {
    for (DType dtype : {kFloat64, kFloat32}) {
      SCOPED_TRACE(c.at("name").get<std::string>() + " " + to_string(dtype));
      const double rtol = dtype == kFloat64 ? 1e-11 : kRtol,
                   atol = dtype == kFloat64 ? 1e-13 : kAtol;
      Tensor q = json_tensor(c.at("q"), dtype).requires_grad_(true);
      Tensor k = json_tensor(c.at("k"), dtype).requires_grad_(true);
      Tensor v = json_tensor(c.at("v"), dtype).requires_grad_(true);
      std::optional<double> scale;
      if (!c.at("scale").is_null()) scale = c.at("scale").get<double>();
      Tensor out = scaled_dot_product_attention(q, k, v, c.at("is_causal").get<bool>(), 0.0, scale);
      out.backward(json_tensor(c.at("w"), dtype));
      EXPECT_TRUE(AllClose(out, json_tensor(c.at("out"), kFloat64), rtol, atol));
      EXPECT_TRUE(AllClose(q.grad(), json_tensor(c.at("grad_q"), kFloat64), rtol, atol));
      EXPECT_TRUE(AllClose(k.grad(), json_tensor(c.at("grad_k"), kFloat64), rtol, atol));
      EXPECT_TRUE(AllClose(v.grad(), json_tensor(c.at("grad_v"), kFloat64), rtol, atol));
    }
  }
}

// float64: PyTorch's expression in the same order, but its vectorized tanh need not be glibc's:
// an ulp of tanh, which 1 + tanh(...) turns into an absolute error of about |x|·1e-16 where it
// cancels (x < -4), hence the absolute tolerance. float32: Lockstep evaluates in double
// and rounds once, PyTorch in float32: the suite's float32 rule.
TEST(AttentionGolden, TanhGeluMatchesPyTorch) {
  for (const auto& c : golden().at("gelu_tanh")) {
    const DType dtype = c.at("dtype").get<std::string>() == "float64" ? kFloat64 : kFloat32;
    SCOPED_TRACE(to_string(dtype));
    const double rtol = dtype == kFloat64 ? 1e-12 : kRtol, atol = dtype == kFloat64 ? 1e-14 : kAtol;
    Tensor x = json_tensor(c.at("x"), dtype).requires_grad_(true);
    Tensor y = gelu(x, "tanh");
    y.backward(json_tensor(c.at("w"), dtype));
    EXPECT_TRUE(AllClose(y, json_tensor(c.at("out"), kFloat64), rtol, atol));
    EXPECT_TRUE(AllClose(x.grad(), json_tensor(c.at("grad"), kFloat64), rtol, atol));
    nn::GELU m("tanh");
    EXPECT_TRUE(BitEqual(m.forward(x.detach()), y.detach()));
    EXPECT_EQ(std::dynamic_pointer_cast<nn::GELU>(m.clone())->approximate(), "tanh");
  }
}

// ---- refused inputs
// -------------------------------------------------------------------------------

TEST(AttentionOpsErrors, Matmul) {
  const Tensor a3 = zeros({2, 3, 4});
  expect_error<ShapeError>([&] { matmul(zeros({4}), a3); },
                           {"matmul", "[4]", "[2, 3, 4]", "at least 2"});
  expect_error<ShapeError>(
      [&] {
        matmul(a3, zeros({2, 5, 6}));
      },
      {"[2, 3, 4]", "[2, 5, 6]", "inner dimensions"});
  expect_error<ShapeError>(
      [&] {
        matmul(a3, zeros({3, 4, 5}));
      },
      {"[2, 3, 4]", "[3, 4, 5]", "do not broadcast"});
  expect_error<ShapeError>(
      [&] {
        matmul(zeros({2, 1, 3, 4}), zeros({1, 2, 4, 5}));
      },
      {"[2, 1, 3, 4]", "[1, 2, 4, 5]", "not implemented"});
  expect_error<DTypeError>([&] { matmul(a3, zeros({2, 4, 5}, kFloat64)); }, {"matmul", "dtype"});
  expect_error<DTypeError>(
      [&] {
        matmul(zeros({2, 3, 4}, kInt64), zeros({2, 4, 5}, kInt64));
      },
      {"matmul", "int64"});
}

TEST(AttentionOpsErrors, TransposePermuteSplit) {
  const Tensor a = zeros({2, 3, 4});
  expect_error<IndexError>([&] { transpose(a, 0, 3); }, {"transpose", "dimension 3", "3-d"});
  expect_error<IndexError>([&] { transpose(a, -4, 0); }, {"transpose", "dimension -4"});
  expect_error<IndexError>(
      [&] {
        permute(a, {0, 1});
      },
      {"permute", "(0, 1)", "[2, 3, 4]", "has 3"});
  expect_error<IndexError>(
      [&] {
        permute(a, {0, 2, -1});
      },
      {"permute", "dimension 2 appears twice"});
  expect_error<IndexError>([&] { permute(a, {0, 1, 3}); }, {"permute", "dimension 3"});
  expect_error<ValueError>([&] { split(a, 0, 1); },
                           {"split", "positive", "got 0", "size 3", "[2, 3, 4]"});
  expect_error<ValueError>([&] { split(a, -2, 0); }, {"split", "got -2"});
  expect_error<IndexError>([&] { split(a, 1, 3); }, {"split", "dimension 3"});
}

TEST(AttentionOpsErrors, Gelu) {
  expect_error<ValueError>([] { gelu(zeros({3}), "erf"); }, {"gelu", "'none' or 'tanh'", "'erf'"});
  expect_error<ValueError>([] { nn::GELU m("Tanh"); }, {"GELU", "'Tanh'"});
  EXPECT_EQ(nn::GELU().approximate(), "none");
}

TEST(AttentionOpsErrors, ScaledDotProductAttention) {
  const Tensor x = zeros({2, 3, 5, 4});
  auto sdpa = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return scaled_dot_product_attention(q, k, v);
  };
  expect_error<ShapeError>([&] { sdpa(zeros({4}), zeros({4}), zeros({4})); },
                           {"scaled_dot_product_attention", "query [4]", "at least 2"});
  expect_error<ShapeError>(
      [&] {
        sdpa(x, zeros({3, 5, 4}), x);
      },
      {"query [2, 3, 5, 4]", "key [3, 5, 4]", "value [2, 3, 5, 4]", "number of dimensions"});
  expect_error<ShapeError>([&] { sdpa(x, zeros({2, 2, 5, 4}), x); }, {"leading dimensions"});
  expect_error<ShapeError>([&] { sdpa(x, x, zeros({1, 3, 5, 4})); }, {"leading dimensions"});
  expect_error<ShapeError>([&] { sdpa(x, zeros({2, 3, 5, 3}), x); }, {"embedding sizes"});
  expect_error<ShapeError>([&] { sdpa(x, x, zeros({2, 3, 6, 4})); }, {"sequence lengths"});
  expect_error<DTypeError>(
      [&] {
        sdpa(x, x, zeros({2, 3, 5, 4}, kFloat64));
      },
      {"scaled_dot_product_attention", "dtype"});
  expect_error<DTypeError>(
      [&] {
        const Tensor i = zeros({2, 5, 4}, kInt64);
        sdpa(i, i, i);
      },
      {"scaled_dot_product_attention", "int64"});
  for (double p : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
    expect_error<ValueError>([&] { scaled_dot_product_attention(x, x, x, true, p); },
                             {"scaled_dot_product_attention", "dropout_p must be in [0, 1]"});
}

TEST(AttentionOpsErrors, QkvAttention) {
  const Tensor qkv = zeros({2, 5, 12});
  expect_error<ValueError>([&] { qkv_attention(qkv, 0); }, {"qkv_attention", "n_head", "got 0"});
  expect_error<ShapeError>([&] { qkv_attention(zeros({2, 5, 10}), 2); },
                           {"qkv_attention", "n_head=2", "[2, 5, 10]"});
  expect_error<ShapeError>([&] { qkv_attention(zeros({5, 12}), 2); }, {"[B, T, 3·C]", "[5, 12]"});
  expect_error<ValueError>([&] { qkv_attention(qkv, 2, true, 1.5); },
                           {"qkv_attention", "dropout_p must be in [0, 1]"});
  expect_error<DTypeError>([&] { qkv_attention(zeros({2, 5, 12}, kInt64), 2); },
                           {"qkv_attention", "int64"});
}


}  // namespace
}  // namespace lockstep::testing
