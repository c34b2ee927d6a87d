#include "support/cnn_golden.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/golden.h"

namespace lockstep::testing {

namespace {

// {key: {shape, dtype, data}}: float32 and int64 tensors (num_batches_tracked is a 0-d int64).
StateDict read_state(const nlohmann::ordered_json& j) {
  StateDict sd;
  for (auto& [name, v] : j.items()) {
    const Shape shape(v.at("shape").get<std::vector<std::int64_t>>());
    const std::string dtype = v.at("dtype").get<std::string>();
    // tensor() of an empty shape gives [1]: a 0-d entry (num_batches_tracked) is reshaped.
    if (dtype == "int64") {
      const auto data = v.at("data").get<std::vector<std::int64_t>>();
      Tensor t = tensor(std::span<const std::int64_t>(data));
      sd.insert(name, reshape(t, shape));
    } else if (dtype == "float32") {
      const auto data = v.at("data").get<std::vector<float>>();
      Tensor t = tensor(std::span<const float>(data));
      sd.insert(name, reshape(t, shape));
    } else {
      throw Error("cnn golden: key " + name + " has dtype " + dtype);
    }
  }
  return sd;
}

}  // namespace

CnnGolden load_cnn_golden(const std::string& name) {
  const std::string path = test_data_path("cnn/" + name + ".json");
  std::ifstream in(path);
  if (!in) throw Error("cannot open golden file " + path);
  nlohmann::ordered_json j;
  try {
    in >> j;
    CnnGolden g;
    g.name = j.at("name").get<std::string>();
    g.layers = j.at("layers").get<std::vector<std::string>>();
    g.conv_bias = j.at("conv_bias").get<bool>();
    const auto xs = j.at("x").get<std::vector<float>>();
    g.x = tensor(std::span<const float>(xs), Shape(j.at("x_shape").get<std::vector<std::int64_t>>()));
    const auto ys = j.at("y").get<std::vector<std::int64_t>>();
    g.y = tensor(std::span<const std::int64_t>(ys));
    g.initial = read_state(j.at("initial_state"));
    g.optimizer = j.at("optimizer").at("kind").get<std::string>();
    g.lr = j.at("optimizer").at("lr").get<double>();
    g.momentum = j.at("optimizer").value("momentum", 0.0);
    g.batch_size = j.at("batch_size").get<std::int64_t>();
    g.steps = j.at("steps").get<std::int64_t>();
    for (auto& [devices, e] : j.at("expected").items()) {
      CnnGolden::Expected x;
      x.step_losses = e.at("step_losses").get<std::vector<double>>();
      x.running_mean_1 = e.at("running_mean_1_per_step").get<std::vector<std::vector<double>>>();
      x.final_state = read_state(e.at("final_state"));
      x.eval_output = e.at("eval_output").get<std::vector<double>>();
      g.expected[std::stoi(devices)] = std::move(x);
    }
    return g;
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error("malformed golden file " + path + ": " + e.what());
  }
}

std::shared_ptr<nn::Sequential> small_cnn(bool conv_bias) {
  using std::make_shared;
  auto conv = [conv_bias](std::int64_t in, std::int64_t out) {
    return make_shared<nn::Conv2d>(in, out, Size2{3, 3}, Size2{1, 1}, Size2{1, 1}, Size2{1, 1}, 1,
                                   conv_bias);
  };
  return make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      conv(1, 4), make_shared<nn::BatchNorm2d>(4), make_shared<nn::ReLU>(),
      make_shared<nn::MaxPool2d>(2), conv(4, 8), make_shared<nn::BatchNorm2d>(8),
      make_shared<nn::ReLU>(), make_shared<nn::MaxPool2d>(2), make_shared<nn::Flatten>(),
      make_shared<nn::Linear>(72, 16), make_shared<nn::ReLU>(), make_shared<nn::Linear>(16, 10)});
}

}  // namespace lockstep::testing
