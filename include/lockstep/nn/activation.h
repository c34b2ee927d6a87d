// Activation modules (torch.nn.ReLU, Tanh, Sigmoid, GELU); no parameters.
#pragma once

#include <string>
#include <utility>

#include "lockstep/core/error.h"
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

/// torch.nn.GELU(approximate=...): "none" (PyTorch's default) is the exact x·Φ(x), "tanh" the
/// tanh approximation (nanoGPT's MLP uses the exact one). ValueError for any other string.
class GELU : public Cloneable<GELU> {
 public:
  explicit GELU(std::string approximate = "none") : approximate_(std::move(approximate)) {
    if (approximate_ != "none" && approximate_ != "tanh")
      throw ValueError("GELU: approximate must be 'none' or 'tanh', got '" + approximate_ + "'");
  }
  Tensor forward(const Tensor& x) override { return gelu(x, approximate_); }
  void reset() override {}
  std::string name() const override { return "GELU"; }
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

}  // namespace lockstep::nn
