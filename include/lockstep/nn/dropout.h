// nn::Dropout (torch.nn.Dropout): zeroes elements with probability p in training mode and
// scales the rest by 1/(1−p); the identity in eval mode.
#pragma once

#include "lockstep/nn/module.h"
#include "lockstep/ops/ops.h"

namespace lockstep::nn {

class Dropout : public Cloneable<Dropout> {
 public:
  /// ValueError for p outside [0, 1]. Masks come from `gen` (not owned; must outlive the module)
  /// or the default generator.
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training(), gen); }
  void reset() override {}
  std::string name() const override { return "Dropout"; }

  double p;
  Generator* gen;
};

}  // namespace lockstep::nn
