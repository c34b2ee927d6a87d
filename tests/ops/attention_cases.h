// The case table of tests/ops/attention_test.cpp and attention_values_test.cpp (issue 19):
// matmul over leading batch dimensions, transpose, permute, split, the tanh GELU and
// scaled_dot_product_attention, as odd-shaped cases (T = 1, head size 1, B = H = 1, L != S,
// zero-size batches, broadcast operands), and run(): forward + backward of one case under a
// kernel mode. Everything is in an anonymous namespace: each test file gets its own copy.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/json_data.h"
#include "support/gradcheck.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using ops::KernelMode;
using ops::KernelModeGuard;
using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

struct Case {
  std::string name;
  std::vector<Shape> shapes;
  Fn fn;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Tensor Matmul(const Inputs& x) { return matmul(x[0], x[1]); }
Tensor Sdpa(const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }
Tensor SdpaCausal(const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }
// Pieces of split, reordered and weighted, so that each piece's gradient is checked apart.
Tensor SplitDim1(const Inputs& x) {
  auto p = split(x[0], 2, 1);
  std::vector<Tensor> parts;
  for (std::size_t i = p.size(); i-- > 0;) parts.push_back(mul(p[i], 1.0 + static_cast<double>(i)));
  return cat(parts, 1);
}

// The one table: used by the kernel agreement below and by gradcheck (float64).
std::vector<Case> cases() {
  return {
      // batched matmul: identical leading dims of ranks 3 and 4
      {"bmm_3d", {{3, 7, 33}, {3, 33, 5}}, Matmul},
      {"bmm_4d", {{2, 3, 5, 4}, {2, 3, 4, 6}}, Matmul},
      {"bmm_b1", {{1, 4, 3}, {1, 3, 2}}, Matmul},
      {"bmm_t1", {{2, 2, 1, 3}, {2, 2, 3, 1}}, Matmul},
      {"bmm_k1", {{2, 5, 1}, {2, 1, 5}}, Matmul},
      {"bmm_batch0", {{0, 3, 4}, {0, 4, 2}}, Matmul},
      {"bmm_m0", {{2, 0, 4}, {2, 4, 3}}, Matmul},
      {"bmm_k0", {{2, 3, 0}, {2, 0, 4}}, Matmul},
      {"bmm_n0", {{2, 3, 4}, {2, 4, 0}}, Matmul},
      // one operand broadcast over the other's batch (a 2-d weight; leading 1s)
      {"bmm_b_2d", {{2, 3, 5, 4}, {4, 6}}, Matmul},
      {"bmm_a_2d", {{5, 4}, {3, 4, 6}}, Matmul},
      {"bmm_a_lead1", {{1, 5, 4}, {3, 4, 6}}, Matmul},
      {"bmm_b_lead1_1", {{2, 1, 5, 4}, {1, 1, 4, 2}}, Matmul},
      {"bmm_b_2d_batch0", {{0, 5, 4}, {4, 3}}, Matmul},
      // transpose / permute / split
      {"transpose_12", {{2, 3, 4, 5}}, [](const Inputs& x) { return transpose(x[0], 1, 2); }},
      {"transpose_neg", {{3, 1, 7}}, [](const Inputs& x) { return transpose(x[0], -1, -3); }},
      {"transpose_same", {{3, 4}}, [](const Inputs& x) { return transpose(x[0], 1, 1); }},
      {"transpose_empty", {{2, 0, 3}}, [](const Inputs& x) { return transpose(x[0], 0, 2); }},
      {"permute_0213",
       {{2, 3, 4, 5}},
       [](const Inputs& x) {
         return permute(x[0], {0, 2, 1, 3});
       }},
      {"permute_rev",
       {{2, 3, 4}},
       [](const Inputs& x) {
         return permute(x[0], {-1, 1, 0});
       }},
      {"permute_cycle",
       {{3, 1, 5, 2}},
       [](const Inputs& x) {
         return permute(x[0], {3, 0, 1, 2});
       }},
      {"permute_0d", {Shape{}}, [](const Inputs& x) { return permute(x[0], {}); }},
      {"split_dim1", {{3, 7, 2}}, SplitDim1},
      {"split_dim0",
       {{5, 3}},
       [](const Inputs& x) {
         auto p = split(x[0], 3, 0);
         return cat({mul(p[1], 2.0), p[0]}, 0);
       }},
      // the tanh GELU
      {"gelu_tanh", {{7, 33}}, [](const Inputs& x) { return gelu(x[0], "tanh"); }},
      {"gelu_tanh_1", {{1}}, [](const Inputs& x) { return gelu(x[0], "tanh"); }},
      {"gelu_none", {{7, 5}}, [](const Inputs& x) { return gelu(x[0], "none"); }},
      // attention: [B, H, T, hs] and other ranks
      {"sdpa_causal", {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}}, SdpaCausal},
      {"sdpa_full", {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}}, Sdpa},
      {"sdpa_t1", {{2, 2, 1, 3}, {2, 2, 1, 3}, {2, 2, 1, 3}}, SdpaCausal},
      {"sdpa_hs1", {{1, 2, 6, 1}, {1, 2, 6, 1}, {1, 2, 6, 1}}, SdpaCausal},
      {"sdpa_b1_h1", {{1, 1, 7, 3}, {1, 1, 7, 3}, {1, 1, 7, 3}}, SdpaCausal},
      {"sdpa_l3_s5_ev2", {{1, 2, 3, 4}, {1, 2, 5, 4}, {1, 2, 5, 2}}, SdpaCausal},
      {"sdpa_l5_s3", {{2, 5, 3}, {2, 3, 3}, {2, 3, 3}}, SdpaCausal},
      {"sdpa_2d", {{4, 3}, {4, 3}, {4, 2}}, Sdpa},
      {"sdpa_batch0", {{0, 2, 3, 4}, {0, 2, 3, 4}, {0, 2, 3, 4}}, SdpaCausal},
      {"sdpa_scale",
       {{1, 2, 4, 6}, {1, 2, 4, 6}, {1, 2, 4, 6}},
       [](const Inputs& x) {
         return scaled_dot_product_attention(x[0], x[1], x[2], true, 0.0, 0.7);
       }},
      // qkv_attention on c_attn's packed [B, T, 3C] (fast: strided fused kernel; reference:
      // nanoGPT's split / view / transpose lines)
      {"sdpa_qkv", {{2, 5, 12}}, [](const Inputs& x) { return qkv_attention(x[0], 2); }},
      {"sdpa_qkv_t1", {{2, 1, 6}}, [](const Inputs& x) { return qkv_attention(x[0], 2); }},
      {"sdpa_qkv_hs1", {{1, 6, 9}}, [](const Inputs& x) { return qkv_attention(x[0], 3); }},
      {"sdpa_qkv_full", {{2, 4, 12}}, [](const Inputs& x) { return qkv_attention(x[0], 1, false); }},
  };
}

// Only in the kernel agreement (too large for a finite-difference check): products that split
// the batch over the intra-op team.
std::vector<Case> large_cases() {
  return {
      {"bmm_large", {{8, 64, 48}, {8, 48, 40}}, Matmul},
      {"bmm_large_b_2d", {{6, 64, 48}, {48, 40}}, Matmul},
      {"sdpa_large", {{2, 4, 64, 32}, {2, 4, 64, 32}, {2, 4, 64, 32}}, SdpaCausal},
      {"sdpa_qkv_large", {{2, 64, 384}}, [](const Inputs& x) { return qkv_attention(x[0], 4); }},
  };
}

Inputs random_inputs(const Case& c, DType dtype, Generator& gen) {
  Inputs in;
  for (const Shape& s : c.shapes)
    in.push_back(randn(s, kFloat64, &gen).to(dtype).requires_grad_(true));
  return in;
}

// Output followed by each input's gradient, for one dtype and kernel mode.
std::vector<Tensor> run(const Case& c, DType dtype, KernelMode mode) {
  KernelModeGuard guard(mode);
  Generator gen(19);
  Inputs in = random_inputs(c, dtype, gen);
  Tensor out = c.fn(in);
  out.backward(randn(out.shape(), kFloat64, &gen).to(dtype));
  std::vector<Tensor> result{out.detach()};
  for (auto& t : in) result.push_back(t.grad());
  return result;
}


}  // namespace
}  // namespace lockstep::testing
