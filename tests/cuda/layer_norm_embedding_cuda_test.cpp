// layer_norm and embedding on cuda:0 against the same ops on the CPU (fast kernels), over the
// tables of tests/ops/layer_norm_embedding_cases.h, float32 and float64: the output and every
// input's gradient. Embedding's lookup is a copy and its backward adds each row's gradients in
// index order with round-to-nearest adds, so it must agree bit for bit; layer norm's row sums
// are a block reduction in double (another order than the CPU's), so it agrees within
// |cuda − cpu| ≤ tol + tol·|cpu|, tol 1e-5 (float32) or 1e-12 (float64). Mixed devices fail with
// DeviceError. Every test skips, printing the reason, where no GPU is present.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "ops/layer_norm_embedding_cases.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);

// Output and each input's gradient, copied to the host; the same seeded inputs and output
// gradient on every device.
std::vector<Tensor> run_on(const GptOpCase& c, DType dtype, Device device) {
  Generator gen(77);
  std::vector<Tensor> in;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    Tensor t = randn(c.shapes[i], kFloat64, &gen);
    if (i == 0 && (c.scale != 1.0 || c.shift != 0.0)) t = add(mul(t, c.scale), c.shift);
    in.push_back(t.to(dtype).to(device).requires_grad_(true));
  }
  Tensor out = c.fn(in);
  Generator wgen(78);
  out.backward(randn(out.shape(), kFloat64, &wgen).to(dtype).to(device));
  std::vector<Tensor> result{out.detach().to(cpu())};
  for (auto& t : in) result.push_back(t.grad().to(cpu()));
  return result;
}

void expect_agree(const GptOpCase& c, DType dtype, double tol) {
  const auto gpu = run_on(c, dtype, kCuda0);
  const auto host = run_on(c, dtype, cpu());
  ASSERT_EQ(gpu.size(), host.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    EXPECT_EQ(gpu[i].dtype(), dtype);
    if (c.bit_exact)
      EXPECT_TRUE(BitEqual(gpu[i], host[i])) << c.name << " result " << i;
    else
      EXPECT_TRUE(AllClose(gpu[i], host[i], tol, tol)) << c.name << " result " << i;
  }
}

class GptOpCuda : public ::testing::TestWithParam<std::tuple<GptOpCase, DType>> {};

TEST_P(GptOpCuda, MatchesTheCpu) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto& [c, dtype] = GetParam();
  expect_agree(c, dtype, dtype == kFloat32 ? 1e-5 : 1e-12);
}

INSTANTIATE_TEST_SUITE_P(GptOps, GptOpCuda,
                         ::testing::Combine(::testing::ValuesIn(all_gpt_op_cases()),
                                            ::testing::Values(kFloat32, kFloat64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// Rows longer than a block, more columns than a block and a grid-stride loop beyond its first
// round (embedding: vocab · dim > the grid's threads).
TEST(GptOpCudaLarge, LayerNormAndEmbeddingOnLargeInputs) {
  LOCKSTEP_REQUIRE_CUDA();
  using gpt_cases_detail::cycle;
  using gpt_cases_detail::emb;
  using gpt_cases_detail::ln;
  expect_agree(ln("big", {64, 33, 768}, {768}, true, true), kFloat32, 1e-4);
  expect_agree(ln("big_no_bias", {16, 2000}, {2000}, true, false), kFloat32, 1e-4);
  expect_agree(emb("big", 4096, 300, cycle(3000, 4096), {30, 100}), kFloat32, 0);
  expect_agree(emb("hot_rows", 50, 768, cycle(5000, 3), {5000}), kFloat32, 0);
}

TEST(GptOpCudaErrors, MixedDevicesAreRefused) {
  LOCKSTEP_REQUIRE_CUDA();
  const Tensor x = randn({2, 3}).to(kCuda0);
  EXPECT_THROW(layer_norm(x, {3}, ones({3})), DeviceError);
  const Tensor idx = tensor(std::span<const std::int64_t>(std::vector<std::int64_t>{0, 1}));
  EXPECT_THROW(embedding(x, idx), DeviceError);
  EXPECT_THROW(embedding(randn({2, 3}), idx.to(kCuda0)), DeviceError);
  EXPECT_THROW(
      embedding(x, tensor(std::span<const std::int64_t>(std::vector<std::int64_t>{2})).to(kCuda0)),
      IndexError);
}

}  // namespace
}  // namespace lockstep::testing
