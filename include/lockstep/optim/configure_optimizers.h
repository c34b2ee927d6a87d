// nanoGPT's optimizer set-up (karpathy/nanoGPT model.py, GPT.configure_optimizers): AdamW with
// two parameter groups, weight decay on every parameter with at least 2 dimensions (the matmul
// weights and embeddings) and none on the rest (biases, LayerNorm weights).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "lockstep/nn/module.h"
#include "lockstep/optim/adam.h"

namespace lockstep::optim {

/// {decay, no decay}: model.named_parameters() that require grad (the tied tensor once), split by
/// dim() >= 2, in named_parameters order; the first group with `weight_decay`, the second with
/// 0. A group may be empty. ValueError for weight_decay negative or not finite.
std::vector<ParamGroup> weight_decay_groups(const nn::Module& model, double weight_decay);

/// torch.optim.AdamW(weight_decay_groups(model, weight_decay), lr=learning_rate, betas=betas)
/// (eps 1e-8): nanoGPT's configure_optimizers (its fused CUDA AdamW computes the same update;
/// Lockstep's AdamW runs one fused launch on a GPU where the parameters lie flat). ValueError as
/// weight_decay_groups and AdamW, or when the model has no parameter that requires grad.
std::shared_ptr<AdamW> configure_optimizers(const nn::Module& model, double weight_decay,
                                            double learning_rate,
                                            std::pair<double, double> betas = {0.9, 0.95});

}  // namespace lockstep::optim
