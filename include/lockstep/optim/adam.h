// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), exactly torch.optim.Adam/AdamW
// without amsgrad:
//   t += 1;  g += weight_decay·p (Adam)   |   p *= 1 − lr·weight_decay (AdamW)
//   m = β1·m + (1 − β1)·g;   v = β2·v + (1 − β2)·g²
//   p −= lr / (1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + eps)
#pragma once

#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

struct AdamOptions {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class Adam : public Optimizer {
 public:
  /// ValueError for lr < 0, eps < 0, betas outside [0, 1), weight_decay < 0.
  Adam(std::vector<Tensor> params, AdamOptions options);
  /// Parameter groups (torch.optim.Adam([{'params': ..., 'weight_decay': ...}, ...])): the
  /// parameters in group order, each group's weight_decay or options.weight_decay where unset;
  /// state indices follow that order. ValueError as above (also for a group's negative
  /// weight_decay, naming the group) or for no parameters in any group.
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  void step() override;
  const AdamOptions& options() const { return options_; }
  /// The weight decay of parameter i (its group's). std::out_of_range for i >= params().size().
  double weight_decay(std::size_t i) const { return weight_decay_.at(i); }

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  std::vector<std::string> state_names() const override {
    return {"step", "exp_avg", "exp_avg_sq"};
  }
  bool supports_flat_step() const override { return true; }
  std::int64_t step_flat(const detail::FlatPlan& plan) override;
  void update_param(std::size_t i, const Tensor& grad) override;

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<double> weight_decay_;  // per parameter, from its group
};

/// AdamW: decoupled weight decay; PyTorch's default weight_decay is 0.01.
struct AdamWOptions {
  double lr = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  /// Parameter groups, as Adam's (nanoGPT: weight decay on the ≥ 2-dim tensors only).
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace lockstep::optim
