// embedding (lockstep/ops/embedding.h): checks as torch.nn.functional.embedding; the lookup and
// its backward through the kernels of src/ops/layer_norm_embedding_kernels.h on the CPU; on a
// GPU the lookup is cuda_ops::index_select and the backward the kernel of
// src/ops/cuda_layer_norm_embedding_ops.h over a counting sort of the indices made here on the
// host. The indices are saved for backward as a host copy (a later change of the index tensor
// does not alter the gradient).
#include "lockstep/ops/embedding.h"

#include <memory>
#include <string>
#include <vector>

#include "ops/batch_norm_common.h"
#include "ops/cuda_layer_norm_embedding_ops.h"
#include "ops/cuda_ops.h"
#include "ops/layer_norm_embedding_kernels.h"

namespace lockstep {

using autograd::needs_grad;
using autograd::record;
using detail::bn_ptr;

namespace {

constexpr const char* kEmbedding = "embedding";

void check_embedding_args(const Tensor& weight, const Tensor& indices) {
  detail::check_floating(kEmbedding, weight);
  detail::check_defined(kEmbedding, indices);
  if (weight.dim() != 2)
    throw ShapeError(std::string(kEmbedding) +
                     ": expected a 2-d weight [num_embeddings, embedding_dim], got " +
                     weight.shape().str());
  if (indices.dtype() != kInt64)
    throw DTypeError(std::string(kEmbedding) + ": expected int64 indices, got " +
                     to_string(indices.dtype()) + " " + indices.shape().str());
  // As index_select: cpu:k devices share host memory; a GPU needs both on the same device.
  if (indices.device() != weight.device() &&
      (weight.device().is_cuda() || indices.device().is_cuda()))
    throw DeviceError(std::string(kEmbedding) + ": expected the indices on the weight's device " +
                      weight.device().str() + ", got " + indices.device().str());
}

// The indices as a host array, each checked against [0, vocab): IndexError naming the first
// bad one, its (row-major) position and the vocabulary size.
std::shared_ptr<const std::vector<std::int64_t>> checked_host_indices(const Tensor& indices,
                                                                      std::int64_t vocab) {
  auto host = std::make_shared<std::vector<std::int64_t>>(indices.to_vector<std::int64_t>());
  for (std::size_t i = 0; i < host->size(); ++i) {
    const std::int64_t v = (*host)[i];
    if (v < 0 || v >= vocab)
      throw IndexError(std::string(kEmbedding) + ": index " + std::to_string(v) + " at position " +
                       std::to_string(i) + " of indices " + indices.shape().str() +
                       " is out of range for an embedding of " + std::to_string(vocab) +
                       " rows (expected 0 <= index < " + std::to_string(vocab) + ")");
  }
  return host;
}

// Counting sort of the indices: order [count] = the positions i sorted stably by index[i],
// offsets [vocab + 1] = where each row's run starts in order.
struct IndexRuns {
  std::vector<std::int64_t> order, offsets;
};
IndexRuns index_runs(const std::vector<std::int64_t>& index, std::int64_t vocab) {
  IndexRuns r;
  r.offsets.assign(static_cast<std::size_t>(vocab) + 1, 0);
  for (std::int64_t v : index) ++r.offsets[static_cast<std::size_t>(v) + 1];
  for (std::size_t v = 1; v < r.offsets.size(); ++v) r.offsets[v] += r.offsets[v - 1];
  std::vector<std::int64_t> next(r.offsets.begin(), r.offsets.end() - 1);
  r.order.resize(index.size());
  for (std::size_t i = 0; i < index.size(); ++i)
    r.order[static_cast<std::size_t>(next[static_cast<std::size_t>(index[i])]++)] =
        static_cast<std::int64_t>(i);
  return r;
}

// dweight on a GPU: the runs uploaded, one thread per element of dweight.
Tensor embedding_backward_cuda(const Tensor& gy, const std::vector<std::int64_t>& index,
                               const Shape& weight_shape) {
  Tensor gw = empty(weight_shape, gy.options());
  const IndexRuns runs = index_runs(index, weight_shape[0]);
  const Tensor order = tensor(std::span<const std::int64_t>(runs.order)).to(gy.device());
  const Tensor offsets = tensor(std::span<const std::int64_t>(runs.offsets)).to(gy.device());
  detail::visit_float(gy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    cuda_layer_norm_embedding::embedding_backward<T>(
        bn_ptr<T>(gy), bn_ptr<std::int64_t>(order), bn_ptr<std::int64_t>(offsets), weight_shape[0],
        weight_shape[1], bn_ptr<T>(gw), gy.device().index);
  });
  return gw;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_embedding_args(weight, indices);
  const std::int64_t vocab = weight.size(0), dim = weight.size(1), count = indices.numel();
  const auto host_index = checked_host_indices(indices, vocab);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = empty(out_shape, weight.options());
  if (weight.device().is_cuda()) {
    if (out.numel() > 0)
      cuda_ops::index_select(weight, 0, indices.reshape({count}), out.reshape({count, dim}));
  } else {
    detail::visit_float(weight.dtype(), [&](auto zero) {
      using T = decltype(zero);
      kernels::dispatch::embedding<T>(bn_ptr<T>(weight), host_index->data(), count, dim,
                                      bn_ptr<T>(out));
    });
  }
  if (needs_grad({&weight}))
    record("EmbeddingBackward", out, {&weight},
           [host_index, weight_shape = weight.shape()](const Tensor& gy) {
             if (gy.device().is_cuda())
               return std::vector<Tensor>{embedding_backward_cuda(gy, *host_index, weight_shape)};
             Tensor gw = empty(weight_shape, gy.options());
             detail::visit_float(gy.dtype(), [&](auto zero) {
               using T = decltype(zero);
               kernels::dispatch::embedding_backward<T>(
                   bn_ptr<T>(gy), host_index->data(), static_cast<std::int64_t>(host_index->size()),
                   weight_shape[0], weight_shape[1], bn_ptr<T>(gw));
             });
             return std::vector<Tensor>{gw};
           });
  return out;
}

}  // namespace lockstep
