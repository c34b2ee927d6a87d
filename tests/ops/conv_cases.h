// The one table of conv2d cases, shared by tests/ops/conv2d_test.cpp (gradient check, fast vs
// reference kernels) and tests/cuda/conv2d_cuda_test.cpp (CUDA vs CPU). Odd shapes on purpose:
// 1×1 kernels (the direct GEMM path and a strided one), stride larger than the kernel, padding
// equal to the kernel's half, batch 0 and 1, a 1-pixel image, depthwise and grouped channels,
// non-square kernels, strides, paddings and dilations, batches over the fast weight gradient's
// chunk of 8 samples, and the reference CNN's two layers (large enough for the fast kernels'
// parallel paths).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {

struct ConvCase {
  std::string name;
  std::int64_t n, c_in, h, w;  ///< input [n, c_in, h, w]
  std::int64_t c_out, kh, kw;  ///< weight [c_out, c_in / groups, kh, kw]
  Size2 stride{1, 1}, padding{0, 0}, dilation{1, 1};
  std::int64_t groups = 1;
  bool bias = true;
  bool small = true;  ///< cheap enough for a finite-difference gradient check

  Shape x_shape() const { return {n, c_in, h, w}; }
  Shape w_shape() const { return {c_out, c_in / groups, kh, kw}; }
};

inline void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<ConvCase> conv_cases() {
  // clang-format off
  return {
      //  name                  n  cin h  w  cout kh kw stride  padding dilation groups bias
      {"basic_3x3",             2, 3, 5, 6, 4, 3, 3},
      {"pad_half_3x3",          2, 2, 5, 5, 3, 3, 3, {1, 1}, {1, 1}},
      {"pad_half_5x5",          1, 2, 6, 5, 2, 5, 5, {1, 1}, {2, 2}},
      {"one_by_one",            2, 4, 3, 3, 5, 1, 1},
      {"one_by_one_stride2",    1, 3, 5, 4, 2, 1, 1, {2, 2}, {0, 0}, {1, 1}, 1, false},
      {"one_by_one_padded",     2, 2, 3, 2, 3, 1, 1, {1, 1}, {1, 1}},
      {"stride_gt_kernel",      2, 2, 7, 7, 3, 2, 2, {3, 3}},
      {"batch0",                0, 3, 5, 5, 2, 3, 3, {1, 1}, {1, 1}},
      {"batch0_1x1",            0, 2, 4, 4, 3, 1, 1},
      {"batch1_nobias",         1, 3, 4, 5, 2, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, false},
      {"one_pixel_image",       2, 3, 1, 1, 4, 3, 3, {1, 1}, {1, 1}},
      {"one_pixel_1x1",         3, 2, 1, 1, 2, 1, 1},
      {"kernel_equals_image",   2, 2, 3, 4, 3, 3, 4},
      {"depthwise",             2, 4, 5, 5, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 4},
      {"depthwise_multiplier",  1, 3, 4, 4, 6, 3, 3, {2, 2}, {1, 1}, {1, 1}, 3},
      {"grouped_3x2",           2, 4, 5, 4, 6, 3, 2, {1, 1}, {0, 1}, {1, 1}, 2},
      {"non_square",            2, 2, 6, 7, 3, 2, 3, {2, 1}, {1, 0}},
      {"dilation2",             2, 2, 7, 7, 2, 3, 3, {1, 1}, {2, 2}, {2, 2}},
      {"dilation_non_square",   1, 2, 6, 8, 3, 2, 3, {1, 2}, {0, 1}, {2, 1}, 1, false},
      {"dilation_stride_groups",2, 4, 9, 8, 4, 3, 2, {2, 3}, {1, 2}, {2, 3}, 2},
      // more samples than the fast weight gradient's chunk of 8: partial sums per chunk
      {"batch_over_chunk",     19, 2, 5, 5, 3, 3, 3, {1, 1}, {1, 1}},
      {"batch_chunks_parallel",12, 8, 10, 10, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true, false},
      // the reference CNN's layers (bench: batch 128), smaller batches: not gradient-checked
      {"cnn_layer1",            3, 1, 28, 28, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true, false},
      {"cnn_layer2",            4, 16, 14, 14, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true, false},
      {"wide_1x1",              3, 24, 7, 9, 40, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, true, false},
      {"grouped_large",         2, 12, 16, 15, 18, 3, 3, {1, 1}, {1, 1}, {1, 1}, 3, true, false},
  };
  // clang-format on
}

/// Leaves x, weight and bias (undefined without bias) of a case, drawn N(0, 1) in float64 from
/// `seed`, then cast to `dtype` and moved to `device`; each requires grad.
struct ConvInputs {
  Tensor x, w, b;
};
inline ConvInputs make_inputs(const ConvCase& c, DType dtype, std::uint64_t seed,
                              Device device = cpu()) {
  Generator gen(seed);
  auto leaf = [&](const Shape& s) {
    return randn(s, kFloat64, &gen).to(dtype).to(device).requires_grad_(true);
  };
  ConvInputs in;
  in.x = leaf(c.x_shape());
  in.w = leaf(c.w_shape());
  if (c.bias) in.b = leaf({c.c_out});
  return in;
}
inline Tensor run_conv(const ConvCase& c, const ConvInputs& in) {
  return conv2d(in.x, in.w, in.b, c.stride, c.padding, c.dilation, c.groups);
}
/// [N, C_out, H_out, W_out] by PyTorch's formula floor((H + 2p − d·(k − 1) − 1) / s) + 1.
inline Shape expected_out(const ConvCase& c) {
  auto size = [](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
  };
  return {c.n, c.c_out, size(c.h, c.kh, c.stride[0], c.padding[0], c.dilation[0]),
          size(c.w, c.kw, c.stride[1], c.padding[1], c.dilation[1])};
}

}  // namespace lockstep::testing
