// nanoGPT's configure_optimizers (karpathy/nanoGPT model.py): AdamW, weight decay on the
// parameters with at least 2 dimensions only.
#include "lockstep/optim/configure_optimizers.h"

#include <cmath>
#include <string>

namespace lockstep::optim {

std::vector<ParamGroup> weight_decay_groups(const nn::Module& model, double weight_decay) {
  if (!std::isfinite(weight_decay) || weight_decay < 0)
    throw ValueError("weight_decay_groups: weight_decay must be finite and non-negative, got " +
                     std::to_string(weight_decay));
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  // "Any parameters that is 2D will be weight decayed, otherwise no. i.e. all weight tensors in
  // matmuls + embeddings decay, all biases and layernorms don't."
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  }
  return {std::move(decay), std::move(no_decay)};
}

std::shared_ptr<AdamW> configure_optimizers(const nn::Module& model, double weight_decay,
                                            double learning_rate,
                                            std::pair<double, double> betas) {
  std::vector<ParamGroup> groups = weight_decay_groups(model, weight_decay);
  if (groups[0].params.empty() && groups[1].params.empty())
    throw ValueError("configure_optimizers: " + model.name() +
                     " has no parameter that requires grad");
  AdamWOptions o;
  o.lr = learning_rate;
  o.beta1 = betas.first;
  o.beta2 = betas.second;
  o.weight_decay = weight_decay;
  return std::make_shared<AdamW>(std::move(groups), o);
}

}  // namespace lockstep::optim
