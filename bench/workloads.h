// The workloads of issue 2's "Speed it must measure", shared by bench_core (timing) and
// profile_step (callgrind driver), so both measure exactly the same step.
//
//   reference: Linear(10,5)-ReLU-Linear(5,2), batch 32, CrossEntropyLoss, SGD lr 0.01
//              (the model of examples/reference_classifier.cpp, members fc1/fc2)
//   mlp:       Linear(784,256)-ReLU-Linear(256,256)-ReLU-Linear(256,10), batch 128,
//              CrossEntropyLoss, SGD lr 0.01
//
// One step is what a training loop does per batch: zero_grad (set to none) + forward +
// cross-entropy + backward + SGD step. The batch is made once, before timing, so data loading
// is not part of the step.
#pragma once

#include <cstdint>
#include <memory>

#include "lockstep/lockstep.h"

namespace lockstep::bench {

// The reference program's model (examples/reference_classifier.cpp).
struct ReferenceNet : nn::Cloneable<ReferenceNet> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  ReferenceNet() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 5));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(5, 2));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = relu(fc1->forward(input));
    return fc2->forward(x);
  }
};

// A model, its optimizer and one fixed batch.
struct Workload {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<optim::SGD> optimizer;
  nn::CrossEntropyLoss criterion;
  Tensor x, y;
  std::int64_t batch = 0;

  // One training step; returns the loss tensor (0-d) so callers can keep it alive/inspect it.
  Tensor step() {
    optimizer->zero_grad();
    Tensor out = model->forward(x);
    Tensor loss = criterion(out, y);
    loss.backward();
    optimizer->step();
    return loss;
  }
};

inline Workload make_reference_workload(std::uint64_t seed = 0) {
  manual_seed(seed);
  Workload w;
  w.model = std::make_shared<ReferenceNet>();
  w.optimizer = std::make_shared<optim::SGD>(w.model->parameters(), optim::SGDOptions{.lr = 0.01});
  w.batch = 32;
  w.x = randn({w.batch, 10});
  w.y = randint(0, 2, {w.batch});
  return w;
}

inline Workload make_mlp_workload(std::uint64_t seed = 0) {
  manual_seed(seed);
  Workload w;
  w.model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 10)});
  w.optimizer = std::make_shared<optim::SGD>(w.model->parameters(), optim::SGDOptions{.lr = 0.01});
  w.batch = 128;
  w.x = randn({w.batch, 784});
  w.y = randint(0, 10, {w.batch});
  return w;
}

}  // namespace lockstep::bench
