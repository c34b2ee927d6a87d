// Stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum,
// exactly torch.optim.SGD:
//   d = g + weight_decay·p
//   b = d (first step) or momentum·b + (1 − dampening)·d
//   d = d + momentum·b (nesterov) or b
//   p = p − lr·d
#pragma once

#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  /// ValueError for negative lr/momentum/weight_decay, or nesterov without momentum > 0 and
  /// dampening == 0 (PyTorch's rule).
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
  bool supports_flat_step() const override { return true; }
  std::int64_t step_flat(const detail::FlatPlan& plan) override;
  void update_param(std::size_t i, const Tensor& grad) override;

 private:
  SGDOptions options_;
};

}  // namespace lockstep::optim
