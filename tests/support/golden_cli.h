// Golden trajectories as command-line input: CSV rows written exactly and the optimizer flags
// (shared by the CLI end-to-end tests and the mpirun tests).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "e2e/cli_support.h"
#include "support/golden.h"

namespace lockstep::e2e {

/// `g`'s rows [begin, end) as CSV lines "f1,...,fF,label" with every float written exactly.
inline std::string csv_rows(const testing::Golden& g, std::int64_t begin, std::int64_t end) {
  const std::int64_t f = g.x.size(1);
  const float* x = g.x.data_ptr<float>();
  const std::int64_t* y = g.y.data_ptr<std::int64_t>();
  std::string s;
  char buf[40];
  for (std::int64_t i = begin; i < end; ++i) {
    for (std::int64_t j = 0; j < f; ++j) {
      std::snprintf(buf, sizeof buf, "%.17g,", static_cast<double>(x[i * f + j]));
      s += buf;
    }
    s += std::to_string(y[i]) + "\n";
  }
  return s;
}

/// The command-line flags for golden `g`'s optimizer.
inline std::vector<std::string> optimizer_flags(const testing::Golden& g) {
  auto num = [](double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  std::vector<std::string> f{"--optimizer", g.optimizer, "--lr", num(g.lr)};
  if (g.optimizer == "sgd") {
    f = f +
        std::vector<std::string>{"--momentum", num(g.momentum), "--dampening", num(g.dampening)};
    if (g.nesterov) f.push_back("--nesterov");
  } else {
    f = f +
        std::vector<std::string>{"--betas", num(g.beta1) + "," + num(g.beta2), "--eps", num(g.eps)};
  }
  if (g.has_weight_decay) f = f + std::vector<std::string>{"--weight-decay", num(g.weight_decay)};
  return f;
}

/// --model text for golden `g` ("mlp:10,5,2").
inline std::string golden_model_spec(const testing::Golden& g) {
  std::string model = "mlp:";
  for (std::size_t i = 0; i < g.sizes.size(); ++i)
    model += (i ? "," : "") + std::to_string(g.sizes[i]);
  return model;
}

}  // namespace lockstep::e2e
