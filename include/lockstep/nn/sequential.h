// nn::Sequential: children named "0", "1", ... run in order (torch.nn.Sequential), so
// parameters are named `0.weight`, `0.bias`, `2.weight`, ...
#pragma once

#include <initializer_list>
#include <memory>

#include "lockstep/nn/module.h"

namespace lockstep::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  /// Appends `m` under the next index.
  void push_back(std::shared_ptr<Module> m);
  std::size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](std::size_t i) const { return named_children().at(i).second; }

  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> clone() const override;
  std::string name() const override { return "Sequential"; }
};

}  // namespace lockstep::nn
