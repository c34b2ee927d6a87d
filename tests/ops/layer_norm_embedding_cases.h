// The case tables of layer_norm and embedding, shared by tests/ops/layer_norm_embedding_test.cpp
// (gradient checks, reference vs fast kernels, thread counts) and
// tests/cuda/layer_norm_embedding_cuda_test.cpp (CUDA vs CPU). Odd shapes: layer_norm on [1, 1],
// rows of length 1, zero rows, a 1-d input, normalized over one, two and three trailing
// dimensions, without weight and bias, with only one of them (nanoGPT's bias=False), large
// values (|x| ~ 1e4, σ ~ 100), rows longer than a CUDA block; embedding with repeated indices,
// 0-d/1-d/2-d/3-d index tensors, V = 1, D = 1 and empty index tensors.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {

struct GptOpCase {
  std::string name;
  /// The differentiable inputs: layer_norm's x, then the weight and/or bias it uses;
  /// embedding's weight.
  std::vector<Shape> shapes;
  /// The op on the inputs (embedding's indices are fixed by the case and made on the weight's
  /// device).
  std::function<Tensor(const std::vector<Tensor>& in)> fn;
  /// x = scale·N(0, 1) + shift (layer_norm's first input only).
  double scale = 1.0, shift = 0.0;
  /// Whether the fast and reference kernels are designed to give the same bits (embedding).
  bool bit_exact = false;
};

inline void PrintTo(const GptOpCase& c, std::ostream* os) { *os << c.name; }

namespace gpt_cases_detail {
using In = std::vector<Tensor>;

// layer_norm of x [shape] over `normalized` with weight / bias as asked.
inline GptOpCase ln(std::string name, Shape shape, Shape normalized, bool w, bool b,
                    double eps = 1e-5, double scale = 1.0, double shift = 0.0) {
  std::vector<Shape> shapes{shape};
  if (w) shapes.push_back(normalized);
  if (b) shapes.push_back(normalized);
  return {"LayerNorm_" + std::move(name),
          shapes,
          [=](const In& x) {
            const Tensor weight = w ? x[1] : Tensor();
            const Tensor bias = b ? x[w ? 2 : 1] : Tensor();
            return layer_norm(x[0], normalized, weight, bias, eps);
          },
          scale,
          shift,
          false};
}

// embedding of a [vocab, dim] weight at `index` (values given, shaped `index_shape`).
inline GptOpCase emb(std::string name, std::int64_t vocab, std::int64_t dim,
                     std::vector<std::int64_t> index, Shape index_shape) {
  return {"Embedding_" + std::move(name),
          {{vocab, dim}},
          [=](const In& x) {
            return embedding(
                x[0], tensor(std::span<const std::int64_t>(index), index_shape).to(x[0].device()));
          },
          1.0,
          0.0,
          true};
}

// count indices i·7 + 3 mod vocab (every row hit several times when count > vocab).
inline std::vector<std::int64_t> cycle(std::int64_t count, std::int64_t vocab) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < count; ++i) v.push_back((i * 7 + 3) % vocab);
  return v;
}
}  // namespace gpt_cases_detail

inline std::vector<GptOpCase> layer_norm_cases() {
  using gpt_cases_detail::ln;
  return {
      ln("1x1", {1, 1}, {1}, true, true),
      ln("3x5_over_5", {3, 5}, {5}, true, true),
      ln("2x3x4_over_3x4", {2, 3, 4}, {3, 4}, true, true),
      ln("2x2x3x5_over_2x3x5", {2, 2, 3, 5}, {2, 3, 5}, true, true),
      ln("1d_input", {6}, {6}, true, true),
      ln("no_affine", {4, 7}, {7}, false, false),
      ln("weight_only", {3, 5}, {5}, true, false),
      ln("bias_only", {3, 5}, {5}, false, true),
      ln("rows_of_length_1", {4, 1}, {1}, true, true),
      ln("zero_rows", {0, 5}, {5}, true, true),
      ln("zero_rows_3d", {2, 0, 3}, {3}, true, false),
      ln("eps_0p1", {2, 9}, {9}, true, true, 0.1),
      ln("large_values", {3, 8}, {8}, true, true, 1e-5, 100.0, 1e4),
      ln("rows_longer_than_a_block", {3, 300}, {300}, true, true),
  };
}

inline std::vector<GptOpCase> embedding_cases() {
  using gpt_cases_detail::cycle;
  using gpt_cases_detail::emb;
  return {
      emb("repeated_2d", 6, 3, {0, 2, 2, 5, 0, 2}, {2, 3}),
      emb("0d_index", 5, 4, {3}, {}),
      emb("1d", 7, 2, {6, 0, 6, 6, 1}, {5}),
      emb("3d", 4, 3, cycle(12, 4), {2, 2, 3}),
      emb("one_row", 1, 5, {0, 0, 0}, {3}),
      emb("dim_1", 5, 1, {4, 4, 2}, {3}),
      emb("empty_indices", 5, 3, {}, {0}),
      emb("empty_2d_indices", 5, 3, {}, {2, 0}),
      emb("many_repeats_wide", 3, 33, cycle(40, 3), {40}),
  };
}

/// Both tables, in that order (the test names).
inline std::vector<GptOpCase> all_gpt_op_cases() {
  std::vector<GptOpCase> out = layer_norm_cases();
  for (auto& c : embedding_cases()) out.push_back(std::move(c));
  return out;
}

}  // namespace lockstep::testing
