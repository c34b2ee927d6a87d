// nn::LayerNorm and nn::Embedding (torch.nn.LayerNorm / torch.nn.Embedding): parameter names,
// shapes and initialisation (ones and zeros; N(0, 1)), bias=false and elementwise_affine=false
// without the keys, forward through the ops, clone() and a state_dict round trip, and bad
// arguments and inputs that name the layer.
#include <gtest/gtest.h>

#include <cmath>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

std::vector<std::string> keys(const nn::Module& m) { return m.state_dict().keys(); }
std::vector<double> V(const Tensor& t) { return t.to_vector<double>(); }

TEST(LayerNormLayer, ParametersFollowPyTorch) {
  nn::LayerNorm ln(6);
  EXPECT_EQ(ln.name(), "LayerNorm");
  EXPECT_EQ(keys(ln), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(ln.weight.shape(), (Shape{6}));
  EXPECT_EQ(V(ln.weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(V(ln.bias), std::vector<double>(6, 0.0));
  EXPECT_TRUE(ln.weight.requires_grad() && ln.bias.requires_grad());
  EXPECT_EQ(ln.eps, 1e-5);
  nn::LayerNorm two(Shape{3, 4});
  EXPECT_EQ(two.weight.shape(), (Shape{3, 4}));
  EXPECT_EQ(two.bias.shape(), (Shape{3, 4}));
  // nanoGPT's LayerNorm(ndim, bias=False): a weight, no bias key
  nn::LayerNorm no_bias(6, 1e-5, true, false);
  EXPECT_EQ(keys(no_bias), (std::vector<std::string>{"weight"}));
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  nn::LayerNorm plain(6, 1e-5, false);
  EXPECT_TRUE(keys(plain).empty());
  EXPECT_FALSE(plain.weight.defined());
}

TEST(LayerNormLayer, ForwardIsTheOp) {
  Generator gen(4);
  nn::LayerNorm ln(Shape{2, 3}, 1e-3, true, false);
  {
    NoGradGuard no_grad;
    ln.weight.copy_(randn({2, 3}, kFloat32, &gen));
  }
  const Tensor x = randn({4, 2, 3}, kFloat32, &gen);
  EXPECT_TRUE(BitEqual(ln.forward(x), layer_norm(x, {2, 3}, ln.weight, Tensor(), 1e-3)));
  Tensor y = ln.forward(x);
  sum(y).backward();
  EXPECT_TRUE(ln.weight.grad().defined());
}

TEST(LayerNormLayer, CloneAndStateDictRoundTrip) {
  Generator gen(5);
  nn::LayerNorm ln(5);
  {
    NoGradGuard no_grad;
    ln.weight.copy_(randn({5}, kFloat32, &gen));
    ln.bias.copy_(randn({5}, kFloat32, &gen));
  }
  auto copy = std::dynamic_pointer_cast<nn::LayerNorm>(ln.clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(BitEqual(copy->weight, ln.weight));
  EXPECT_TRUE(BitEqual(copy->bias, ln.bias));
  EXPECT_NE(copy->weight.data_ptr<float>(), ln.weight.data_ptr<float>());  // its own parameters
  const Tensor x = randn({3, 5}, kFloat32, &gen);
  EXPECT_TRUE(BitEqual(copy->forward(x), ln.forward(x)));
  nn::LayerNorm fresh(5);
  fresh.load_state_dict(ln.state_dict());
  EXPECT_TRUE(BitEqual(fresh.forward(x), ln.forward(x)));
  nn::LayerNorm no_bias(5, 1e-5, true, false);
  EXPECT_THROW(no_bias.load_state_dict(ln.state_dict()), StateDictError);  // unexpected "bias"
  auto cloned_no_bias = std::dynamic_pointer_cast<nn::LayerNorm>(no_bias.clone());
  EXPECT_EQ(keys(*cloned_no_bias), (std::vector<std::string>{"weight"}));
}

TEST(LayerNormLayer, BadArgumentsAndInputsNameTheLayer) {
  expect_error<ValueError>([] { nn::LayerNorm(Shape{}); }, {"LayerNorm", "at least one"});
  expect_error<ValueError>([] { nn::LayerNorm(Shape{3, -1}); }, {"LayerNorm", "[3, -1]"});
  nn::LayerNorm ln(Shape{4});
  expect_error<ShapeError>(
      [&] {
        ln.forward(zeros({2, 5}));
      },
      {"LayerNorm([4])", "normalized_shape=[4]", "[2, 5]"});
}

TEST(EmbeddingLayer, ParametersAndInitFollowPyTorch) {
  manual_seed(0);
  nn::Embedding emb(200, 50);
  EXPECT_EQ(emb.name(), "Embedding");
  EXPECT_EQ(keys(emb), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(emb.weight.shape(), (Shape{200, 50}));
  EXPECT_EQ(emb.weight.dtype(), kFloat32);
  EXPECT_TRUE(emb.weight.requires_grad());
  // N(0, 1): 10,000 draws, mean within 5 standard errors (0.05) of 0, std within 3 %.
  const auto w = V(emb.weight);
  double mean = 0, sq = 0;
  for (double v : w) mean += v;
  mean /= static_cast<double>(w.size());
  for (double v : w) sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / static_cast<double>(w.size() - 1));
  EXPECT_LT(std::abs(mean), 0.05);
  EXPECT_NEAR(sd, 1.0, 0.03);
}

TEST(EmbeddingLayer, ForwardCloneAndStateDictRoundTrip) {
  manual_seed(1);
  nn::Embedding emb(7, 3);
  const std::vector<std::int64_t> iv{6, 0, 6, 2};
  const Tensor idx = tensor(std::span<const std::int64_t>(iv), {2, 2});
  const Tensor y = emb.forward(idx);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_TRUE(BitEqual(y, embedding(emb.weight, idx)));
  auto copy = std::dynamic_pointer_cast<nn::Embedding>(emb.clone());
  ASSERT_TRUE(copy);
  EXPECT_TRUE(BitEqual(copy->weight, emb.weight));
  EXPECT_NE(copy->weight.data_ptr<float>(), emb.weight.data_ptr<float>());
  EXPECT_TRUE(BitEqual(copy->forward(idx), y));
  nn::Embedding fresh(7, 3);
  EXPECT_FALSE(BitEqual(fresh.weight, emb.weight));
  fresh.load_state_dict(emb.state_dict());
  EXPECT_TRUE(BitEqual(fresh.weight, emb.weight));
  sum(emb.forward(idx)).backward();
  // rows 6 (twice), 0 and 2 were looked up
  const auto g = V(emb.weight.grad());
  EXPECT_EQ(g[6 * 3], 2.0);
  EXPECT_EQ(g[0], 1.0);
  EXPECT_EQ(g[1 * 3], 0.0);
}

TEST(EmbeddingLayer, BadArgumentsAndInputsNameTheLayer) {
  expect_error<ValueError>([] { nn::Embedding(-1, 3); }, {"Embedding", "num_embeddings=-1"});
  nn::Embedding emb(5, 3);
  expect_error<IndexError>(
      [&] { emb.forward(tensor(std::span<const std::int64_t>(std::vector<std::int64_t>{5}))); },
      {"Embedding(5, 3)", "index 5", "5 rows"});
  expect_error<DTypeError>([&] { emb.forward(zeros({2})); }, {"Embedding(5, 3)", "int64"});
}

}  // namespace
}  // namespace lockstep::testing
