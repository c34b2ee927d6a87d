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
  void step() override;
  const AdamOptions& options() const { return options_; }
  bool supports_sliced_step() const override { return all_params_on_cpu(); }

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled);
  std::vector<std::string> state_names() const override {
    return {"step", "exp_avg", "exp_avg_sq"};
  }
  bool supports_flat_step() const override { return true; }
  std::int64_t step_flat(const detail::FlatPlan& plan) override;
  void prepare_param(std::size_t i) override;
  void update_range(std::size_t i, const Tensor& grad, std::int64_t lo, std::int64_t hi) override;
  void commit_param(std::size_t i) override;

 private:
  AdamOptions options_;
  bool decoupled_;
  // Per parameter, for the step being made: its step number (t) and moment tensors; `fresh`:
  // the moments were created for this step (its first) and are not state yet.
  struct Pending {
    double step = 0;
    Tensor m, v;
    bool fresh = false;
  };
  std::vector<Pending> pending_;
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
};

}  // namespace lockstep::optim
