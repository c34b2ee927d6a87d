// nn::Embedding (torch.nn.Embedding, torch/nn/modules/sparse.py).
#pragma once

#include "lockstep/nn/module.h"

namespace lockstep::nn {

class Embedding : public Cloneable<Embedding> {
 public:
  /// Parameter weight [num_embeddings, embedding_dim] (float32) drawn from N(0, 1), as
  /// PyTorch's reset_parameters (init.normal_); no padding_idx, max_norm or sparse gradients.
  /// ValueError for negative sizes.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim);

  /// embedding(weight, indices) (lockstep/ops/embedding.h): int64 indices of any shape [...]
  /// -> [..., embedding_dim]. IndexError naming the layer for an index outside
  /// [0, num_embeddings); DTypeError naming it for indices that are not int64.
  Tensor forward(const Tensor& indices) override;
  void reset() override;
  std::string name() const override { return "Embedding"; }

  std::int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

}  // namespace lockstep::nn
