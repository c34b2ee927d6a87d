// nn::Embedding: PyTorch's Embedding (torch/nn/modules/sparse.py) over lockstep::embedding.
#include "lockstep/nn/embedding.h"

#include <string>

#include "lockstep/nn/init.h"
#include "lockstep/ops/ops.h"

namespace lockstep::nn {

Embedding::Embedding(std::int64_t num_embeddings_, std::int64_t embedding_dim_)
    : num_embeddings(num_embeddings_), embedding_dim(embedding_dim_) {
  if (num_embeddings < 0 || embedding_dim < 0)
    throw ValueError("Embedding: sizes must be non-negative, got num_embeddings=" +
                     std::to_string(num_embeddings) +
                     ", embedding_dim=" + std::to_string(embedding_dim));
  reset();
}

void Embedding::reset() {
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0);
}

Tensor Embedding::forward(const Tensor& indices) {
  auto layer = [this] {
    return "Embedding(" + std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim) +
           "): ";
  };
  try {
    return embedding(weight, indices);
  } catch (const IndexError& e) {
    throw IndexError(layer() + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(layer() + e.what());
  }
}

}  // namespace lockstep::nn
