// nn::resnet20 (He et al. 2016's CIFAR ResNet-20, torchvision's names) against PyTorch's own
// numbers (tests/data/resnet/resnet20_step.json, made by make_resnet_golden.py; format in its
// README.md): the state_dict's names, shapes and parameter count; one SGD step (momentum, weight
// decay) in train mode from PyTorch's initial state reproduces its logits, loss, final
// parameters and buffers and the eval-mode logits after the step; the state survives a
// safetensors round trip bit for bit; clone() computes the same outputs; a wrong input names the
// layer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "support/golden.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;

// Convolutions and BatchNorm sum in other orders than PyTorch's kernels (tests/golden/
// cnn_golden_test.cpp uses the same rule).
constexpr double kRtol = 1e-4, kAtol = 1e-5;

std::string base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) throw Error("resnet golden: bad base64 character");
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// IEEE 754 binary16 -> binary32 (exact; subnormals included).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1F;
  const std::uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) throw Error("resnet golden: a float16 Inf or NaN");
  float magnitude = exp == 0 ? std::ldexp(static_cast<float>(mant), -24)
                             : std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  std::uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// One {shape, dtype, encoding, data} entry (README.md): int (a JSON list), f32 (base64 of
// little-endian float32), f16 (base64 of little-endian float16) or f32_top24 (base64 of the top
// 3 bytes of each float32, little endian; the low byte is zero).
Tensor decode(const nlohmann::json& e) {
  const Shape shape(e.at("shape").get<std::vector<std::int64_t>>());
  const std::string encoding = e.at("encoding").get<std::string>();
  if (encoding == "int") {
    const auto data = e.at("data").get<std::vector<std::int64_t>>();
    return reshape(tensor(std::span<const std::int64_t>(data)), shape);
  }
  const std::string bytes = base64_decode(e.at("data").get<std::string>());
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t width = encoding == "f32" ? 4 : encoding == "f16" ? 2 : 3;
  if (encoding != "f32" && encoding != "f16" && encoding != "f32_top24")
    throw Error("resnet golden: unknown encoding " + encoding);
  if (bytes.size() != static_cast<std::size_t>(shape.numel()) * width)
    throw Error("resnet golden: " + encoding + " data of " + std::to_string(bytes.size()) +
                " bytes for shape " + shape.str());
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const unsigned char* p = b + i * width;
    if (width == 2) {
      v[i] = half_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8)));
    } else {
      const std::uint32_t bits =
          width == 4
              ? (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
                 std::uint32_t{p[3]} << 24)
              : (std::uint32_t{p[0]} << 8 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 24);
      std::memcpy(&v[i], &bits, 4);
    }
  }
  return reshape(tensor(std::span<const float>(v)), shape);
}

struct ResNetGolden {
  std::int64_t parameter_count = 0;
  Tensor x, y, logits, eval_logits;
  double loss = 0, lr = 0, momentum = 0, weight_decay = 0;
  StateDict initial, final_state;
};

const ResNetGolden& golden() {
  static const ResNetGolden g = [] {
    const std::string path = test_data_path("resnet/resnet20_step.json");
    std::ifstream in(path);
    if (!in) throw Error("cannot open golden file " + path);
    // ordered_json keeps the file's (PyTorch's state_dict) key order.
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
    ResNetGolden r;
    r.parameter_count = j.at("parameter_count").get<std::int64_t>();
    r.x = decode(j.at("x"));
    const auto ys = j.at("y").get<std::vector<std::int64_t>>();
    r.y = tensor(std::span<const std::int64_t>(ys));
    r.logits = decode(j.at("logits"));
    r.eval_logits = decode(j.at("eval_logits"));
    r.loss = j.at("loss").get<double>();
    r.lr = j.at("optimizer").at("lr").get<double>();
    r.momentum = j.at("optimizer").at("momentum").get<double>();
    r.weight_decay = j.at("optimizer").at("weight_decay").get<double>();
    for (auto& [key, e] : j.at("initial_state").items()) r.initial.insert(key, decode(e));
    for (auto& [key, e] : j.at("final_state").items()) r.final_state.insert(key, decode(e));
    return r;
  }();
  return g;
}

// The largest |a − b| and |a − b| / |b| (b != 0) over all elements, for the test's log.
struct Worst {
  double abs = 0, rel = 0;
  void add(const Tensor& a, const Tensor& b) {
    const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
    for (std::size_t i = 0; i < va.size() && i < vb.size(); ++i) {
      const double d = std::abs(va[i] - vb[i]);
      abs = std::max(abs, d);
      if (vb[i] != 0) rel = std::max(rel, d / std::abs(vb[i]));
    }
  }
};

TEST(ResNet20, NamesShapesAndParameterCountAreTorchvisions) {
  const ResNetGolden& g = golden();
  auto model = nn::resnet20();
  const StateDict mine = model->state_dict();
  EXPECT_EQ(mine.keys(), g.initial.keys());  // same names, same (PyTorch's) order
  for (const auto& [key, want] : g.initial) {
    const Tensor* t = mine.find(key);
    ASSERT_NE(t, nullptr) << key;
    EXPECT_EQ(t->shape(), want.shape()) << key;
    EXPECT_EQ(t->dtype(), want.dtype()) << key;
  }
  std::vector<std::string> param_names, buffer_names;
  std::int64_t count = 0;
  for (const auto& [k, p] : model->named_parameters()) {
    param_names.push_back(k);
    count += p.numel();
    EXPECT_TRUE(p.requires_grad()) << k;
  }
  for (const auto& [k, b] : model->named_buffers()) buffer_names.push_back(k);
  EXPECT_EQ(count, g.parameter_count);  // PyTorch's sum(p.numel() for p in model.parameters())
  EXPECT_EQ(count, 272186);
  EXPECT_EQ(param_names.size(), 65u);   // 21 convs + 21 BatchNorm2d x 2 + fc x 2
  EXPECT_EQ(buffer_names.size(), 63u);  // 21 BatchNorm2d x 3
  EXPECT_EQ(param_names.size() + buffer_names.size(), g.initial.size());
  for (const auto& k : buffer_names) {
    const bool is_buffer = k.ends_with(".running_mean") || k.ends_with(".running_var") ||
                           k.ends_with(".num_batches_tracked");
    EXPECT_TRUE(is_buffer) << k;
  }
  EXPECT_EQ(mine.at("layer2.0.downsample.0.weight").shape(), (Shape{32, 16, 1, 1}));
  EXPECT_EQ(mine.at("layer3.0.downsample.1.running_var").shape(), (Shape{64}));
  EXPECT_EQ(mine.at("layer3.2.bn2.num_batches_tracked").dim(), 0);
  EXPECT_FALSE(mine.contains("layer1.0.downsample.0.weight"));
  EXPECT_FALSE(mine.contains("layer2.1.downsample.0.weight"));
  EXPECT_FALSE(mine.contains("conv1.bias"));
  EXPECT_EQ(mine.at("fc.weight").shape(), (Shape{10, 64}));
  // 3 input channels: 288 more in conv1 (the paper's CIFAR-10 model, option B shortcuts).
  EXPECT_EQ(nn::resnet20(3)->parameters().size(), 65u);
  std::int64_t rgb = 0;
  for (const auto& p : nn::resnet20(3)->parameters()) rgb += p.numel();
  EXPECT_EQ(rgb, 272474);
  // Default init, not torchvision's kaiming_normal_: conv1 is U(±1/√9), bn weight 1.
  for (double w : model->conv1->weight.to_vector<double>()) EXPECT_LE(std::abs(w), 1.0 / 3.0);
  EXPECT_EQ(model->bn1->weight.to_vector<double>(), std::vector<double>(16, 1.0));
}

// Every entry of `state` against PyTorch's state after the step (int64 exactly, floats allclose).
void expect_final_state(const StateDict& state, const ResNetGolden& g, Worst& worst) {
  EXPECT_EQ(state.keys(), g.final_state.keys());
  for (const auto& [key, want] : g.final_state) {
    const Tensor* mine = state.find(key);
    ASSERT_NE(mine, nullptr) << key;
    ASSERT_EQ(mine->shape(), want.shape()) << key;
    if (want.dtype() == kInt64) {
      ASSERT_EQ(mine->dtype(), kInt64) << key;
      EXPECT_EQ(mine->to_vector<std::int64_t>(), want.to_vector<std::int64_t>()) << key;
    } else {
      worst.add(*mine, want);
      EXPECT_TRUE(AllClose(*mine, want, kRtol, kAtol)) << key;
    }
  }
}

TEST(ResNet20, OneSgdStepMatchesPyTorch) {
  const ResNetGolden& g = golden();
  auto model = nn::resnet20();
  model->load_state_dict(g.initial);
  model->train();
  optim::SGD opt(
      model->parameters(),
      optim::SGDOptions{.lr = g.lr, .momentum = g.momentum, .weight_decay = g.weight_decay});
  opt.zero_grad();
  Tensor logits = model->forward(g.x);
  Tensor loss = cross_entropy(logits, g.y);
  loss.backward();
  opt.step();
  Worst w_logits, w_state, w_eval;
  w_logits.add(logits.detach(), g.logits);
  EXPECT_TRUE(AllClose(logits.detach(), g.logits, kRtol, kAtol)) << "train-mode logits";
  EXPECT_TRUE(allclose(loss.item(), g.loss, kRtol, kAtol)) << loss.item() << " vs " << g.loss;

  expect_final_state(model->state_dict(), g, w_state);
  model->eval();
  {
    NoGradGuard no_grad;
    Tensor eval_logits = model->forward(g.x);
    w_eval.add(eval_logits, g.eval_logits);
    EXPECT_TRUE(AllClose(eval_logits, g.eval_logits, kRtol, kAtol)) << "eval-mode logits";
  }
  std::printf(
      "resnet20 vs PyTorch: loss %.9g vs %.9g; max |diff| (max rel): logits %.3g (%.3g), "
      "final state %.3g (%.3g), eval logits %.3g (%.3g)\n",
      loss.item(), g.loss, w_logits.abs, w_logits.rel, w_state.abs, w_state.rel, w_eval.abs,
      w_eval.rel);
}

TEST(ResNet20, StateDictSurvivesSafetensorsBitForBit) {
  const ResNetGolden& g = golden();
  auto model = nn::resnet20();
  model->load_state_dict(g.initial);
  model->forward(g.x);  // train mode: running statistics move, num_batches_tracked becomes 1
  model->forward(narrow(g.x, 0, 0, 3));
  std::string dir = (fs::temp_directory_path() / "lockstep_resnet_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/resnet20.safetensors";
  safetensors::save_state_dict(model->state_dict(), path);
  auto fresh = nn::resnet20();
  fresh->load_state_dict(safetensors::to_state_dict(safetensors::load_file(path)));
  std::error_code ec;
  fs::remove_all(dir, ec);
  const StateDict a = model->state_dict(), b = fresh->state_dict();
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [key, t] : a) EXPECT_TRUE(BitEqual(t, b.at(key))) << key;
  EXPECT_EQ(b.at("layer3.2.bn2.num_batches_tracked").item(), 2);
  EXPECT_EQ(b.at("layer3.2.bn2.num_batches_tracked").dtype(), kInt64);
}

TEST(ResNet20, CloneComputesTheSameOutputsWithItsOwnState) {
  const ResNetGolden& g = golden();
  auto model = nn::resnet20();
  model->load_state_dict(g.initial);
  model->forward(g.x);  // buffers away from their initial values
  auto copy = std::dynamic_pointer_cast<nn::ResNet>(model->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->state_dict().keys(), model->state_dict().keys());
  EXPECT_NE(copy->layer2.get(), model->layer2.get());
  ASSERT_NE(copy->layer2, nullptr);
  EXPECT_EQ(copy->named_children().size(), model->named_children().size());
  // Train mode (batch statistics, buffers updated on both) and eval mode: the same bits.
  EXPECT_TRUE(BitEqual(copy->forward(g.x).detach(), model->forward(g.x).detach()));
  model->eval();
  copy->eval();
  NoGradGuard no_grad;
  EXPECT_TRUE(BitEqual(copy->forward(g.x), model->forward(g.x)));
  const StateDict a = model->state_dict(), b = copy->state_dict();
  for (const auto& [key, t] : a) EXPECT_TRUE(BitEqual(t, b.at(key))) << key;
  // Its own storage: changing the original leaves the copy alone.
  model->fc->weight.mul_(2.0);
  Tensor mean = model->state_dict().at("layer3.0.bn1.running_mean");
  mean.add_(ones({64}));
  EXPECT_FALSE(BitEqual(copy->fc->weight, model->fc->weight));
  EXPECT_FALSE(BitEqual(copy->state_dict().at("layer3.0.bn1.running_mean"),
                        model->state_dict().at("layer3.0.bn1.running_mean")));
}

// convert_sync_batchnorm on a model that is not a Sequential: its clones (DataParallel's
// replicas) keep every layer synchronized, so 2 devices with 3 samples each take PyTorch's
// one-device step on all 6 (SyncBatchNorm's contract). Without the switch surviving clone() the
// replicas ran plain BatchNorm on their 3 samples and the state would differ.
TEST(ResNet20, SyncBatchNormOnTwoDevicesTakesPyTorchsOneDeviceStep) {
  const ResNetGolden& g = golden();
  auto model = nn::resnet20();
  model->load_state_dict(g.initial);
  nn::convert_sync_batchnorm(model);
  int synchronized = 0, plain = 0;
  std::function<void(const nn::Module&)> count = [&](const nn::Module& m) {
    if (const auto* bn = dynamic_cast<const nn::BatchNormBase*>(&m))
      ++(bn->synchronized() ? synchronized : plain);
    for (const auto& child : m.children()) count(*child);
  };
  count(*model->clone());
  EXPECT_EQ(synchronized, 21);  // bn1, 2 in each of the 9 blocks, 2 downsample.1
  EXPECT_EQ(plain, 0);
  parallel::DataParallel dp(model, {cpu(0), cpu(1)});
  optim::SGD opt(
      dp.parameters(),
      optim::SGDOptions{.lr = g.lr, .momentum = g.momentum, .weight_decay = g.weight_decay});
  opt.zero_grad();
  const nn::CrossEntropyLoss criterion;
  Tensor loss = dp.forward_backward(g.x, g.y, criterion);
  opt.step();
  EXPECT_TRUE(allclose(loss.item(), g.loss, kRtol, kAtol)) << loss.item() << " vs " << g.loss;
  Worst worst;
  expect_final_state(model->state_dict(), g, worst);
  std::printf("resnet20 SyncBatchNorm on 2 devices vs PyTorch: max |diff| %.3g (rel %.3g)\n",
              worst.abs, worst.rel);
}

TEST(ResNet20, BadInputNamesTheLayer) {
  auto model = nn::resnet20();
  // Only conv1 sees the input: its ShapeError names the layer and the shape.
  auto unbatched = [&] { model->forward(zeros({1, 28, 28})); };
  auto rgb = [&] { model->forward(zeros({2, 3, 28, 28})); };
  expect_error<ShapeError>(unbatched, {"Conv2d(1, 16, kernel_size=(3, 3))", "[1, 28, 28]"});
  expect_error<ShapeError>(rgb, {"Conv2d(1, 16, kernel_size=(3, 3))", "3 channels"});
  // 2x2 images of one sample: layer2 sees one value per channel (BatchNorm's ValueError).
  auto tiny = [&] { model->forward(zeros({1, 1, 2, 2})); };
  expect_error<ValueError>(tiny, {"BatchNorm2d(32)", "more than 1 value per channel"});
  auto no_inputs = [] { nn::resnet20(0); };
  auto empty_stage = [] { nn::ResNet({3, 0, 3}); };
  auto zero_stride = [] { nn::BasicBlock(16, 32, 0); };
  expect_error<ValueError>(no_inputs, {"ResNet(", "in_channels=0"});
  expect_error<ValueError>(empty_stage, {"ResNet(layers={3, 0, 3}"});
  expect_error<ValueError>(zero_stride, {"BasicBlock(16, 32, stride=0)"});
}

}  // namespace
}  // namespace lockstep::testing
