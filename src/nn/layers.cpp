// Linear, Dropout, Sequential and the initialisers.
#include <cmath>

#include "lockstep/autograd/grad_mode.h"
#include "lockstep/nn/dropout.h"
#include "lockstep/nn/init.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/sequential.h"
#include "lockstep/ops/ops.h"
#include "lockstep/ops/random.h"

namespace lockstep::nn {

namespace init {

void uniform_(Tensor& t, double low, double high, Generator* gen) {
  lockstep::uniform_(t, low, high, gen);
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  lockstep::normal_(t, mean, std, gen);
}

double fan_in(const Tensor& t) {
  double f = static_cast<double>(t.size(1));
  for (int d = 2; d < t.dim(); ++d) f *= static_cast<double>(t.size(d));
  return f;
}

void kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  if (t.numel() == 0) return;
  const double gain = std::sqrt(2.0 / (1.0 + a * a));  // calculate_gain('leaky_relu', a)
  const double std = gain / std::sqrt(fan_in(t));
  const double bound = std::sqrt(3.0) * std;
  init::uniform_(t, -bound, bound, gen);
}

void linear_weight_(Tensor& weight, Generator* gen) { kaiming_uniform_(weight, std::sqrt(5.0), gen); }

}  // namespace init

Linear::Linear(std::int64_t in, std::int64_t out, bool bias)
    : in_features(in), out_features(out), has_bias(bias) {
  if (in < 0 || out < 0)
    throw ValueError("Linear: feature counts must be non-negative, got in_features=" +
                     std::to_string(in) + ", out_features=" + std::to_string(out));
  reset();
}

void Linear::reset() {
  weight = register_parameter("weight", empty({out_features, in_features}));
  init::linear_weight_(weight);
  if (has_bias) {
    bias = register_parameter("bias", empty({out_features}));
    double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& input) { return linear(input, weight, bias); }

Dropout::Dropout(double p, Generator* gen) : p(p), gen(gen) {
  if (!(p >= 0.0 && p <= 1.0))
    throw ValueError("Dropout: probability must be in [0, 1], got " + std::to_string(p));
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  register_child(std::to_string(named_children().size()), std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& [k, m] : named_children()) h = m->forward(h);
  return h;
}

std::shared_ptr<Module> Sequential::clone() const {
  // A module listed twice is cloned once and listed twice in the copy, so that its parameters
  // stay shared (as copy.deepcopy's memo keeps them in PyTorch).
  auto copy = std::make_shared<Sequential>();
  std::vector<std::pair<const Module*, std::shared_ptr<Module>>> cloned;
  for (auto& [k, m] : named_children()) {
    std::shared_ptr<Module> c;
    for (const auto& [orig, done] : cloned)
      if (orig == m.get()) c = done;
    if (!c) cloned.emplace_back(m.get(), c = m->clone());
    copy->push_back(c);
  }
  copy->train(is_training());
  return copy;
}

}  // namespace lockstep::nn
