// Activation modules (torch.nn.ReLU, Tanh, Sigmoid, GELU); no parameters.
#pragma once

#include "lockstep/nn/module.h"
#include "lockstep/ops/ops.h"

namespace lockstep::nn {

class ReLU : public Cloneable<ReLU> {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  void reset() override {}
  std::string name() const override { return "ReLU"; }
};

class Tanh : public Cloneable<Tanh> {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  void reset() override {}
  std::string name() const override { return "Tanh"; }
};

class Sigmoid : public Cloneable<Sigmoid> {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  void reset() override {}
  std::string name() const override { return "Sigmoid"; }
};

/// Exact GELU x·Φ(x) (PyTorch's default approximate='none').
class GELU : public Cloneable<GELU> {
 public:
  Tensor forward(const Tensor& x) override { return gelu(x); }
  void reset() override {}
  std::string name() const override { return "GELU"; }
};

}  // namespace lockstep::nn
