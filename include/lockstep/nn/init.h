// Parameter initialisers (torch.nn.init), drawing from `gen` or the default generator.
#pragma once

#include "lockstep/core/generator.h"
#include "lockstep/core/tensor.h"

namespace lockstep::nn::init {

/// Fills `t` in place with U(low, high).
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
/// Fills `t` in place with N(mean, std²).
void normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
/// kaiming_uniform_ with a = √5: U(−1/√fan_in, 1/√fan_in), the default for nn.Linear and
/// nn.Conv2d weights in PyTorch (gain √(2/(1+a²)) · √(3/fan_in) = 1/√fan_in), fan_in = t.size(1)
/// times the receptive field (the product of dims 2..: kH · kW for a conv weight), as PyTorch's
/// _calculate_fan_in_and_fan_out.
void linear_weight_(Tensor& weight, Generator* gen = nullptr);

}  // namespace lockstep::nn::init
