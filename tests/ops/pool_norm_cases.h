// The case tables of the pooling and batch-norm ops, one per op, shared by
// tests/ops/pool_norm_test.cpp (gradient checks, reference vs fast kernels) and
// tests/cuda/pool_norm_cuda_test.cpp (CUDA vs CPU). Odd shapes: 1×1 kernels, strides larger
// than the kernel, padding equal to the kernel's half, batch 0 and 1, a 1-pixel image, CHW
// input, a constant input (ties in every max-pool window), adaptive output sizes that do not
// divide the input (and one larger than it); batch_norm on 2-d/3-d/4-d input with and without
// weight, bias and running statistics, momentum 0.1 and 1.0, eval mode, N·spatial = 2, batch 0.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {

struct PoolNormCase {
  std::string name;
  /// The differentiable inputs: x first, then (batch_norm) the weight and/or bias it uses.
  std::vector<Shape> shapes;
  /// batch_norm: the channel count of its running_mean / running_var (0: none are passed).
  std::int64_t running_channels = 0;
  /// The op on the inputs and the running statistics (empty or {mean, var}).
  std::function<Tensor(const std::vector<Tensor>& in, const std::vector<Tensor>& running)> fn;
  /// x is constant (every max-pool window ties): no finite-difference check.
  bool constant = false;
};

inline void PrintTo(const PoolNormCase& c, std::ostream* os) { *os << c.name; }

/// running_mean[c] = 0.25·c − 0.5, running_var[c] = 0.5 + 0.75·c: values a momentum update
/// visibly changes.
inline std::vector<Tensor> make_running(const PoolNormCase& c, DType dtype, Device device) {
  if (c.running_channels == 0) return {};
  std::vector<double> m, v;
  for (std::int64_t i = 0; i < c.running_channels; ++i) {
    m.push_back(0.25 * static_cast<double>(i) - 0.5);
    v.push_back(0.5 + 0.75 * static_cast<double>(i));
  }
  const Shape s{c.running_channels};
  return {tensor(std::span<const double>(m), s).to(dtype).to(device),
          tensor(std::span<const double>(v), s).to(dtype).to(device)};
}

namespace cases_detail {
using In = std::vector<Tensor>;
inline PoolNormCase pool(std::string name, Shape shape, Size2 k, std::optional<Size2> s, Size2 p,
                         bool max, bool constant = false) {
  return {std::move(name),
          {std::move(shape)},
          0,
          [=](const In& x, const In&) {
            return max ? max_pool2d(x[0], k, s, p) : avg_pool2d(x[0], k, s, p);
          },
          constant};
}
inline std::vector<PoolNormCase> window_cases(bool max) {
  using S = std::optional<Size2>;
  return {
      pool("k2_4x4", {2, 3, 4, 4}, {2, 2}, S{}, {0, 0}, max),
      pool("k1", {2, 3, 5, 7}, {1, 1}, S{}, {0, 0}, max),
      pool("k3_s1_pad_half", {2, 2, 7, 5}, {3, 3}, Size2{1, 1}, {1, 1}, max),
      pool("k2_stride3", {1, 2, 8, 9}, {2, 2}, Size2{3, 3}, {0, 0}, max),
      pool("k1_stride2", {1, 2, 5, 6}, {1, 1}, Size2{2, 2}, {0, 0}, max),
      pool("rect_k3x2_s2x1_p1x1", {2, 1, 6, 7}, {3, 2}, Size2{2, 1}, {1, 1}, max),
      pool("k4_s2_p2", {1, 1, 6, 6}, {4, 4}, Size2{2, 2}, {2, 2}, max),
      pool("chw", {3, 5, 5}, {2, 2}, S{}, {0, 0}, max),
      pool("batch0", {0, 3, 4, 4}, {2, 2}, S{}, {0, 0}, max),
      pool("batch1_k3_s2", {1, 1, 5, 5}, {3, 3}, Size2{2, 2}, {0, 0}, max),
      pool("pixel", {2, 3, 1, 1}, {1, 1}, S{}, {0, 0}, max),
      pool("pixel_k3_pad1", {1, 2, 1, 1}, {3, 3}, Size2{1, 1}, {1, 1}, max),
      pool("ties_k3_s1", {1, 2, 4, 4}, {3, 3}, Size2{1, 1}, {0, 0}, max, true),
      pool("ties_k2_pad1", {2, 1, 3, 3}, {2, 2}, S{}, {1, 1}, max, true),
      // MaxPool2d(2) rows of 4+ windows (the CPU's four-at-a-time path) with a tail, odd sizes
      pool("k2_9x13", {2, 3, 9, 13}, {2, 2}, S{}, {0, 0}, max),
      pool("ties_k2_8x18", {1, 2, 8, 18}, {2, 2}, S{}, {0, 0}, max, true),
  };
}
inline PoolNormCase adaptive(std::string name, Shape shape, Size2 out) {
  return {std::move(name), {std::move(shape)}, 0, [=](const In& x, const In&) {
            return adaptive_avg_pool2d(x[0], out);
          }};
}
// batch_norm on x [shape] with weight/bias/running statistics as asked.
inline PoolNormCase bn(std::string name, Shape shape, bool w, bool b, bool running, bool training,
                       double momentum = 0.1) {
  const std::int64_t c = shape[1];
  std::vector<Shape> shapes{shape};
  if (w) shapes.push_back({c});
  if (b) shapes.push_back({c});
  return {std::move(name), shapes, running ? c : 0, [=](const In& x, const In& r) {
            const Tensor weight = w ? x[1] : Tensor();
            const Tensor bias = b ? x[w ? 2 : 1] : Tensor();
            return batch_norm(x[0], running ? r[0] : Tensor(), running ? r[1] : Tensor(), weight,
                              bias, training, momentum);
          }};
}
}  // namespace cases_detail

inline std::vector<PoolNormCase> max_pool_cases() { return cases_detail::window_cases(true); }
inline std::vector<PoolNormCase> avg_pool_cases() { return cases_detail::window_cases(false); }

inline std::vector<PoolNormCase> adaptive_avg_pool_cases() {
  using cases_detail::adaptive;
  return {
      adaptive("7x5_to_3x2", {2, 3, 7, 5}, {3, 2}),
      adaptive("10x9_to_3x4", {1, 2, 10, 9}, {3, 4}),
      adaptive("identity", {1, 2, 5, 5}, {5, 5}),
      adaptive("global", {2, 1, 4, 6}, {1, 1}),
      adaptive("chw_5x7_to_4x3", {3, 5, 7}, {4, 3}),
      adaptive("batch0", {0, 2, 4, 4}, {2, 2}),
      adaptive("pixel", {1, 1, 1, 1}, {1, 1}),
      adaptive("upsample_3x3_to_5x4", {1, 1, 3, 3}, {5, 4}),
  };
}

inline std::vector<PoolNormCase> batch_norm_cases() {
  using cases_detail::bn;
  return {
      bn("2d_affine_running", {4, 3}, true, true, true, true),
      bn("2d_n2", {2, 3}, true, true, true, true),
      bn("3d_affine_running", {3, 2, 5}, true, true, true, true),
      bn("3d_n1_l2", {1, 3, 2}, true, false, true, true),
      bn("4d_affine_running", {2, 3, 4, 5}, true, true, true, true),
      bn("4d_n1_1x2", {1, 2, 1, 2}, true, true, true, true),
      bn("4d_no_running", {2, 3, 3, 3}, true, true, false, true),
      bn("4d_no_affine", {3, 2, 2, 3}, false, false, true, true),
      bn("4d_bias_only", {2, 2, 3, 2}, false, true, true, true),
      bn("4d_momentum1", {2, 3, 2, 2}, true, true, true, true, 1.0),
      bn("4d_many_channels", {2, 33, 3, 3}, true, true, true, true),
      bn("eval_4d", {2, 3, 4, 5}, true, true, true, false),
      bn("eval_2d_no_affine", {5, 4}, false, false, true, false),
      bn("eval_3d_weight_only", {2, 3, 4}, true, false, true, false),
      bn("batch0", {0, 3, 4, 4}, true, true, true, true),
  };
}

/// Every case of the four tables, named "<Op>_<case>" (the test names).
inline std::vector<PoolNormCase> all_pool_norm_cases() {
  std::vector<PoolNormCase> out;
  auto add = [&](const std::string& op, std::vector<PoolNormCase> cs) {
    for (auto& c : cs) {
      c.name = op + "_" + c.name;
      out.push_back(std::move(c));
    }
  };
  add("MaxPool", max_pool_cases());
  add("AvgPool", avg_pool_cases());
  add("AdaptiveAvgPool", adaptive_avg_pool_cases());
  add("BatchNorm", batch_norm_cases());
  return out;
}

}  // namespace lockstep::testing
