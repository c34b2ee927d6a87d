// The ops nanoGPT's attention needs (issue 19), on the table of attention_cases.h: every case
// runs forward + backward under the fast and the reference kernels in float32 and float64 and
// they agree; float64 gradcheck of every new op (attention at T = 1 and head size 1). Values,
// PyTorch's numbers and refused inputs: attention_values_test.cpp; the CUDA paths:
// tests/cuda/tensor_ops_test.cpp.
#include <gtest/gtest.h>

#include "attention_cases.h"

namespace lockstep::testing {
namespace {

class AttentionOps : public ::testing::TestWithParam<std::tuple<Case, DType>> {};

TEST_P(AttentionOps, FastMatchesReference) {
  const auto& [c, dtype] = GetParam();
  auto fast = run(c, dtype, KernelMode::Fast);
  auto ref = run(c, dtype, KernelMode::Reference);
  ASSERT_EQ(fast.size(), ref.size());
  const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
  for (std::size_t i = 0; i < fast.size(); ++i) {
    ASSERT_TRUE(fast[i].defined()) << i;
    EXPECT_EQ(fast[i].dtype(), dtype);
    EXPECT_EQ(fast[i].shape(), i == 0 ? fast[0].shape() : c.shapes[i - 1]);
    EXPECT_TRUE(AgreesWithReference(fast[i], ref[i], tol))
        << (i == 0 ? "output" : "grad of input ") << i;
  }
}

std::vector<Case> all_cases() {
  auto c = cases();
  for (auto& l : large_cases()) c.push_back(l);
  return c;
}

INSTANTIATE_TEST_SUITE_P(Table, AttentionOps,
                         ::testing::Combine(::testing::ValuesIn(all_cases()),
                                            ::testing::Values(kFloat32, kFloat64)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  to_string(std::get<1>(info.param));
                         });

class AttentionGradcheck : public ::testing::TestWithParam<Case> {};

// Attention in both kernel modes: the fused kernel's backward (fast) and the composition's.
TEST_P(AttentionGradcheck, Float64) {
  const Case& c = GetParam();
  const bool attention = c.name.rfind("sdpa", 0) == 0;
  for (KernelMode mode : {KernelMode::Fast, KernelMode::Reference}) {
    if (mode == KernelMode::Reference && !attention) continue;
    KernelModeGuard guard(mode);
    Generator gen(7);
    Inputs in = random_inputs(c, kFloat64, gen);
    std::vector<Tensor*> leaves;
    for (auto& t : in) leaves.push_back(&t);
    EXPECT_TRUE(gradcheck([&] { return c.fn(in); }, leaves, gen))
        << (mode == KernelMode::Fast ? "fast" : "reference");
  }
}

INSTANTIATE_TEST_SUITE_P(Table, AttentionGradcheck, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace lockstep::testing
