#include "support/golden.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace lockstep::testing {

std::string test_data_path(const std::string& file) {
  return std::string(LOCKSTEP_TEST_DATA_DIR) + "/" + file;
}

namespace {
StateDict read_params(const nlohmann::json& j) {
  StateDict sd;
  for (auto& [name, v] : j.items()) {
    auto shape = v.at("shape").get<std::vector<std::int64_t>>();
    auto data = v.at("data").get<std::vector<float>>();
    sd.insert(name, tensor(std::span<const float>(data), Shape(shape)));
  }
  return sd;
}
}  // namespace

Golden load_golden(const std::string& name) {
  std::ifstream in(test_data_path(name + ".json"));
  if (!in) throw Error("cannot open golden file " + test_data_path(name + ".json"));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw Error("golden file " + name + ": " + e.what());
  }
  Golden g;
  g.name = name;
  g.sizes = j.at("sizes").get<std::vector<std::int64_t>>();
  g.activation = j.at("activation").get<std::string>();
  g.n_train = j.at("n_train");
  g.n_val = j.at("n_val");
  g.batch_size = j.at("batch_size");
  g.epochs = j.at("epochs");
  const auto& o = j.at("optimizer");
  g.optimizer = o.at("kind");
  g.lr = o.at("lr");
  g.momentum = o.value("momentum", 0.0);
  g.dampening = o.value("dampening", 0.0);
  g.nesterov = o.value("nesterov", false);
  g.has_weight_decay = o.contains("weight_decay");
  g.weight_decay = o.value("weight_decay", 0.0);
  if (o.contains("betas")) {
    g.beta1 = o.at("betas")[0];
    g.beta2 = o.at("betas")[1];
  }
  g.eps = o.value("eps", 1e-8);
  auto x = j.at("x").get<std::vector<float>>();
  auto y = j.at("y").get<std::vector<std::int64_t>>();
  std::int64_t n = g.n_train + g.n_val;
  g.x = tensor(std::span<const float>(x), {n, g.sizes.front()});
  g.y = tensor(std::span<const std::int64_t>(y), {n});
  g.initial = read_params(j.at("initial_parameters"));
  const auto& e = j.at("expected");
  g.final_params = read_params(e.at("final_parameters"));
  g.step_losses = e.at("train_step_losses").get<std::vector<double>>();
  g.val_losses = e.at("val_loss_per_epoch").get<std::vector<double>>();
  return g;
}

std::vector<std::string> golden_names() {
  std::vector<std::string> out;
  for (auto& entry : std::filesystem::directory_iterator(LOCKSTEP_TEST_DATA_DIR))
    if (entry.path().extension() == ".json") out.push_back(entry.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<nn::Sequential> build_mlp(const Golden& g) {
  auto seq = std::make_shared<nn::Sequential>();
  for (std::size_t i = 0; i + 1 < g.sizes.size(); ++i) {
    seq->push_back(std::make_shared<nn::Linear>(g.sizes[i], g.sizes[i + 1]));
    if (i + 2 < g.sizes.size()) {
      if (g.activation == "relu")
        seq->push_back(std::make_shared<nn::ReLU>());
      else if (g.activation == "tanh")
        seq->push_back(std::make_shared<nn::Tanh>());
      else if (g.activation == "sigmoid")
        seq->push_back(std::make_shared<nn::Sigmoid>());
      else if (g.activation == "gelu")
        seq->push_back(std::make_shared<nn::GELU>());
      else
        throw Error("golden " + g.name + ": unknown activation " + g.activation);
    }
  }
  seq->load_state_dict(g.initial);
  return seq;
}

std::unique_ptr<optim::Optimizer> build_optimizer(const Golden& g, std::vector<Tensor> params) {
  if (g.optimizer == "sgd")
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{.lr = g.lr,
                                                          .momentum = g.momentum,
                                                          .dampening = g.dampening,
                                                          .weight_decay = g.weight_decay,
                                                          .nesterov = g.nesterov});
  if (g.optimizer == "adam")
    return std::make_unique<optim::Adam>(std::move(params),
                                         optim::AdamOptions{.lr = g.lr,
                                                            .beta1 = g.beta1,
                                                            .beta2 = g.beta2,
                                                            .eps = g.eps,
                                                            .weight_decay = g.weight_decay});
  if (g.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(
        std::move(params),
        optim::AdamWOptions{.lr = g.lr,
                            .beta1 = g.beta1,
                            .beta2 = g.beta2,
                            .eps = g.eps,
                            .weight_decay = g.has_weight_decay ? g.weight_decay : 0.01});
  throw Error("golden " + g.name + ": unknown optimizer " + g.optimizer);
}

GoldenRun run_golden(const Golden& g, Device device, bool autocast, std::int64_t max_steps) {
  auto model = build_mlp(g);
  model->to(device);
  auto optimizer = build_optimizer(g, model->parameters());
  Tensor x_train = g.x.narrow(0, 0, g.n_train), y_train = g.y.narrow(0, 0, g.n_train);
  Tensor x_val = g.x.narrow(0, g.n_train, g.n_val).to(device);
  Tensor y_val = g.y.narrow(0, g.n_train, g.n_val).to(device);
  data::DataLoader loader(std::make_shared<data::TensorDataset>(x_train, y_train),
                          {.batch_size = g.batch_size});
  GoldenRun run;
  for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch) {
    model->train();
    for (const auto& [bx, by] : loader) {
      if (max_steps >= 0 && std::ssize(run.step_losses) >= max_steps) break;
      optimizer->zero_grad();
      Tensor loss;
      {
        AutocastGuard region(autocast);
        loss = cross_entropy(model->forward(bx.to(device)), by.to(device));
      }
      run.step_losses.push_back(loss.item());
      loss.backward();
      optimizer->step();
    }
    if (max_steps >= 0 && std::ssize(run.step_losses) >= max_steps) break;
    model->eval();
    no_grad guard;
    run.val_losses.push_back(cross_entropy(model->forward(x_val), y_val).item());
  }
  for (const auto& [name, value] : model->state_dict())
    run.final_params.insert(name, value.detach().to(cpu()).clone());
  return run;
}

GoldenRun run_golden_data_parallel(const Golden& g, const std::vector<Device>& devices,
                                   DataParallelPath path, parallel::DataParallelOptions options,
                                   bool autocast, std::int64_t max_steps) {
  auto dp = std::make_shared<nn::DataParallel>(build_mlp(g), devices, std::nullopt, options);
  std::shared_ptr<optim::Optimizer> optimizer = build_optimizer(g, dp->parameters());
  Tensor x_train = g.x.narrow(0, 0, g.n_train), y_train = g.y.narrow(0, 0, g.n_train);
  Tensor x_val = g.x.narrow(0, g.n_train, g.n_val), y_val = g.y.narrow(0, g.n_train, g.n_val);
  data::DataLoader loader(std::make_shared<data::TensorDataset>(x_train, y_train),
                          {.batch_size = g.batch_size});
  nn::CrossEntropyLoss criterion;
  GoldenRun run;
  for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch) {
    dp->train();
    for (const auto& [bx, by] : loader) {
      if (max_steps >= 0 && std::ssize(run.step_losses) >= max_steps) break;
      optimizer->zero_grad();
      if (path == DataParallelPath::Gather) {
        Tensor loss;
        {
          AutocastGuard region(autocast);
          Tensor out = dp->forward(bx);
          loss = criterion(out, by.to(out.device()));
        }
        run.step_losses.push_back(loss.item());
        loss.backward();
      } else {
        AutocastGuard region(autocast);
        run.step_losses.push_back(dp->forward_backward(bx, by, criterion).item());
      }
      optimizer->step();
    }
    if (max_steps >= 0 && std::ssize(run.step_losses) >= max_steps) break;
    dp->eval();
    no_grad guard;
    Tensor out = dp->forward(x_val);
    run.val_losses.push_back(criterion(out, y_val.to(out.device())).item());
  }
  for (const auto& [name, value] : dp->state_dict())
    run.final_params.insert(name, value.detach().to(cpu()).clone());
  return run;
}

void expect_golden(const GoldenRun& run, const Golden& g, const std::string& what, double rtol,
                   double atol) {
  const std::string at = what.empty() ? "" : what + ": ";
  EXPECT_TRUE(AllClose(run.step_losses, g.step_losses, rtol, atol)) << at << "train_step_losses";
  EXPECT_TRUE(AllClose(run.val_losses, g.val_losses, rtol, atol)) << at << "val_loss_per_epoch";
  EXPECT_EQ(run.final_params.size(), g.final_params.size()) << at << "number of parameters";
  for (const auto& [name, expected] : g.final_params) {
    if (!run.final_params.contains(name)) {
      ADD_FAILURE() << at << "no final parameter " << name;
      continue;
    }
    EXPECT_TRUE(AllClose(run.final_params.at(name), expected, rtol, atol)) << at << name;
  }
}

void expect_bit_identical(const GoldenRun& a, const GoldenRun& b, const std::string& what) {
  const std::string at = what.empty() ? "" : what + ": ";
  ASSERT_EQ(a.step_losses.size(), b.step_losses.size()) << at << "number of steps";
  for (std::size_t i = 0; i < a.step_losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.step_losses[i], &b.step_losses[i], sizeof(double)), 0)
        << at << "step " << i << ": " << a.step_losses[i] << " vs " << b.step_losses[i];
  EXPECT_EQ(a.val_losses, b.val_losses) << at << "val_loss_per_epoch";
  EXPECT_EQ(a.final_params.size(), b.final_params.size()) << at << "number of parameters";
  for (const auto& [name, value] : a.final_params) {
    if (!b.final_params.contains(name)) {
      ADD_FAILURE() << at << "no final parameter " << name;
      continue;
    }
    EXPECT_TRUE(BitEqual(value, b.final_params.at(name))) << at << name;
  }
}

}  // namespace lockstep::testing
