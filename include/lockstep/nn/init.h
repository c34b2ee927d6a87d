// Parameter initialisers (torch.nn.init, torch/nn/init.py), drawing from `gen` or the default
// generator: on an MT19937 generator after the same seed they give torch.nn.init's bits (the
// in-place samplers of lockstep/ops/random.h), on Philox Lockstep's own draws.
#pragma once

#include "lockstep/core/generator.h"
#include "lockstep/core/tensor.h"

namespace lockstep::nn::init {

/// Fills `t` in place with U(low, high) (init.uniform_ = Tensor.uniform_).
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
/// Fills `t` in place with N(mean, std²) (init.normal_ = Tensor.normal_).
void normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
/// _calculate_fan_in_and_fan_out's fan_in: t.size(1) times the receptive field (the product of
/// dims 2..: kH · kW for a conv weight); t has at least 2 dims.
double fan_in(const Tensor& t);
/// kaiming_uniform_(t, a, mode='fan_in', nonlinearity='leaky_relu'): U(±bound) with PyTorch's
/// arithmetic, gain = √(2 / (1 + a²)), std = gain / √fan_in, bound = √3 · std (no draws when t
/// has no elements).
void kaiming_uniform_(Tensor& t, double a, Generator* gen = nullptr);
/// kaiming_uniform_ with a = √5, the default for nn.Linear and nn.Conv2d weights in PyTorch
/// (U(±1/√fan_in) up to rounding).
void linear_weight_(Tensor& weight, Generator* gen = nullptr);

}  // namespace lockstep::nn::init
