// layer_norm and embedding (lockstep/ops/layer_norm.h, embedding.h): PyTorch's numbers
// (tests/data/gpt_ops/gpt_ops.json, made by make_gpt_ops_golden.py beside it), values worked out
// by hand, the saved state of backward, autocast, and every error with its message. The case
// tables are checked in layer_norm_embedding_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/json_data.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

// ---- PyTorch's numbers -----------------------------------------------------------------------

const nlohmann::json& golden() {
  static const nlohmann::json j = read_json_data("gpt_ops/gpt_ops.json");
  return j;
}

DType dtype_of(const nlohmann::json& c) {
  return c.at("dtype").get<std::string>() == "float64" ? kFloat64 : kFloat32;
}

// float32: PyTorch sums a row in float (Welford), Lockstep in double: agreement to rounding.
double tol_for(DType dtype) { return dtype == kFloat64 ? 1e-10 : 1e-4; }

TEST(GptOpsGolden, LayerNormMatchesPyTorch) {
  for (const auto& c : golden().at("layer_norm")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const DType dtype = dtype_of(c);
    Tensor x = json_tensor(c.at("x"), dtype).requires_grad_(true);
    Tensor w = json_tensor(c.at("weight"), dtype), b = json_tensor(c.at("bias"), dtype);
    if (w.defined()) w.requires_grad_(true);
    if (b.defined()) b.requires_grad_(true);
    const Shape ns(c.at("normalized_shape").get<std::vector<std::int64_t>>());
    Tensor y = layer_norm(x, ns, w, b, c.at("eps").get<double>());
    y.backward(json_tensor(c.at("dy"), dtype));
    const double tol = tol_for(dtype);
    EXPECT_TRUE(AllClose(y, json_tensor(c.at("y"), dtype), tol, tol)) << "y";
    EXPECT_TRUE(AllClose(x.grad(), json_tensor(c.at("dx"), dtype), tol, tol)) << "dx";
    if (w.defined()) EXPECT_TRUE(AllClose(w.grad(), json_tensor(c.at("dweight"), dtype), tol, tol));
    if (b.defined()) EXPECT_TRUE(AllClose(b.grad(), json_tensor(c.at("dbias"), dtype), tol, tol));
  }
}

TEST(GptOpsGolden, EmbeddingMatchesPyTorch) {
  for (const auto& c : golden().at("embedding")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const DType dtype = dtype_of(c);
    Tensor w = json_tensor(c.at("weight"), dtype).requires_grad_(true);
    const auto& ij = c.at("indices");
    const auto iv = ij.at("data").get<std::vector<std::int64_t>>();
    const Tensor idx = tensor(std::span<const std::int64_t>(iv),
                              Shape(ij.at("shape").get<std::vector<std::int64_t>>()));
    Tensor y = embedding(w, idx);
    y.backward(json_tensor(c.at("dy"), dtype));
    EXPECT_TRUE(BitEqual(y, json_tensor(c.at("y"), dtype))) << "y is a copy of rows";
    const double tol = dtype == kFloat64 ? 1e-14 : 1e-6;
    EXPECT_TRUE(AllClose(w.grad(), json_tensor(c.at("dweight"), dtype), tol, tol)) << "dweight";
  }
}

// ---- values by hand --------------------------------------------------------------------------

TEST(GptOpsValues, LayerNormOfOneTwoThree) {
  const Tensor x = tensor(std::span<const double>(std::vector<double>{1, 2, 3}), {1, 3});
  const double rs = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);
  const Tensor y = layer_norm(x, {3});
  EXPECT_TRUE(AllClose(y.to_vector<double>(), {-rs, 0.0, rs}, 1e-15, 1e-15));
  // weight and bias apply per position of the normalized shape
  const Tensor w = tensor(std::span<const double>(std::vector<double>{2, 3, 4}));
  const Tensor b = tensor(std::span<const double>(std::vector<double>{0.5, -1, 0}));
  EXPECT_TRUE(AllClose(layer_norm(x, {3}, w, b).to_vector<double>(), {-2 * rs + 0.5, -1.0, 4 * rs},
                       1e-15, 1e-15));
}

TEST(GptOpsValues, LayerNormRowOfOneValueIsTheBias) {
  Tensor x = tensor({3.0f, -7.0f}, {2, 1}).requires_grad_(true);
  Tensor b = tensor({0.25f}).requires_grad_(true);
  Tensor y = layer_norm(x, {1}, Tensor(), b);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0.25f, 0.25f}));
  y.backward(tensor({1.0f, 2.0f}, {2, 1}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{3.0f}));
}

TEST(GptOpsValues, LayerNormWithoutRowsGivesZeroParameterGradients) {
  Tensor x = zeros({0, 4}).requires_grad_(true);
  Tensor w = ones({4}).requires_grad_(true), b = zeros({4}).requires_grad_(true);
  Tensor y = layer_norm(x, {4}, w, b);
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  sum(y).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(GptOpsValues, LayerNormUnderAutocastRunsInFloat32) {
  Generator gen(1);
  const Tensor x = randn({4, 8}, kFloat32, &gen), w = randn({8}, kFloat32, &gen);
  const Tensor plain = layer_norm(x, {8}, w);
  AutocastGuard bf16;
  EXPECT_TRUE(BitEqual(layer_norm(x, {8}, w), plain));
}

TEST(GptOpsValues, EmbeddingLooksUpRowsForAnyIndexShape) {
  const Tensor w = reshape(arange(0, 12, 1, kFloat32), {4, 3});
  const Tensor y0 = embedding(w, scalar_tensor(2, kInt64));
  EXPECT_EQ(y0.shape(), (Shape{3}));
  EXPECT_EQ(y0.to_vector<float>(), (std::vector<float>{6, 7, 8}));
  const std::vector<std::int64_t> iv{3, 0, 3, 1};
  const Tensor y2 = embedding(w, tensor(std::span<const std::int64_t>(iv), {2, 2}));
  EXPECT_EQ(y2.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y2.to_vector<float>(), (std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5}));
}

TEST(GptOpsValues, EmbeddingBackwardUsesTheIndicesOfTheForward) {
  Tensor w = zeros({3, 2}).requires_grad_(true);
  Tensor idx = tensor(std::span<const std::int64_t>(std::vector<std::int64_t>{2, 2, 0}));
  Tensor y = embedding(w, idx);
  idx.fill_(1);  // changing the indices afterwards does not move the gradient
  y.backward(tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {3, 2}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{5, 6, 0, 0, 4, 6}));
}

// ---- errors ----------------------------------------------------------------------------------

TEST(GptOpsErrors, LayerNormNamesTheShapes) {
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({3, 4}), {5});
      },
      {"layer_norm", "normalized_shape=[5]", "[*, 5]", "[3, 4]"});
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({2, 3, 4}), {4, 3});
      },
      {"normalized_shape=[4, 3]", "[*, 4, 3]", "[2, 3, 4]"});
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({4}), {2, 4});
      },
      {"normalized_shape=[2, 4]", "got input of size [4]"});
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({3, 4}), Shape{});
      },
      {"at least 1-dimensional", "[3, 4]"});
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({3, 4}), {4}, ones({3}));
      },
      {"weight [3]", "normalized_shape [4]", "[3, 4]"});
  expect_error<ShapeError>(
      [] {
        layer_norm(zeros({3, 4}), {4}, ones({4}), zeros({1, 4}));
      },
      {"bias [1, 4]", "normalized_shape [4]"});
  expect_error<DTypeError>(
      [] {
        layer_norm(zeros({3, 4}, kInt64), {4});
      },
      {"layer_norm", "int64", "[3, 4]"});
  expect_error<DTypeError>(
      [] {
        layer_norm(zeros({3, 4}), {4}, ones({4}, kFloat64));
      },
      {"layer_norm", "float32", "float64"});
  expect_error<ValueError>([] { layer_norm(Tensor(), {4}); }, {"layer_norm", "undefined"});
}

TEST(GptOpsErrors, EmbeddingNamesTheIndexAndTheVocabulary) {
  const Tensor w = zeros({5, 3});
  auto idx = [](std::vector<std::int64_t> v, Shape s) {
    return tensor(std::span<const std::int64_t>(v), s);
  };
  expect_error<IndexError>(
      [&] {
        embedding(w, idx({0, 5, 1}, {3}));
      },
      {"embedding", "index 5", "position 1", "5 rows", "0 <= index < 5"});
  expect_error<IndexError>(
      [&] {
        embedding(w, idx({1, 2, 3, -1}, {2, 2}));
      },
      {"index -1", "position 3", "[2, 2]", "5 rows"});
  expect_error<DTypeError>([&] { embedding(w, zeros({2})); },
                           {"embedding", "int64 indices", "float32 [2]"});
  expect_error<DTypeError>([&] { embedding(w, zeros({2}, kFloat64)); }, {"float64 [2]"});
  expect_error<ShapeError>([&] { embedding(zeros({5}), idx({0}, {1})); },
                           {"embedding", "2-d weight", "[5]"});
  expect_error<ShapeError>([&] { embedding(zeros({2, 5, 3}), idx({0}, {1})); }, {"[2, 5, 3]"});
  expect_error<DTypeError>(
      [&] {
        embedding(zeros({5, 3}, kInt64), idx({0}, {1}));
      },
      {"embedding", "int64"});
  expect_error<IndexError>([&] { embedding(zeros({0, 3}), idx({0}, {1})); }, {"index 0", "0 rows"});
}

}  // namespace
}  // namespace lockstep::testing
