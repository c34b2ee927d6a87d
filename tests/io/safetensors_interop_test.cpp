// The C++ half of the PyTorch interop test. tests/io/safetensors_interop.py (ctest
// io.safetensors_interop) sets LOCKSTEP_INTEROP_DIR and runs
//   1. SafetensorsInterop.WriteForPyTorch: our MLP state_dict -> DIR/ours.safetensors, which the
//      script loads with safetensors.torch.load_file + nn.Sequential.load_state_dict(strict=True);
//   2. SafetensorsInterop.ReadFromPyTorch: DIR/torch.safetensors, written by the script with
//      safetensors.torch.save_file, loaded and checked here.
// Both sides fill tensor k (state_dict order) element i with the same exactly representable
// values, so the checks are bit-exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace fs = std::filesystem;
using namespace lockstep;
namespace st = lockstep::safetensors;

namespace {

std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 10)});
}

/// ((i * 37 + k * 11) % 201 - 100) / 64: the values we write (safetensors_interop.py: ours_value).
float ours_value(std::int64_t k, std::int64_t i) {
  return static_cast<float>((i * 37 + k * 11) % 201 - 100) / 64.0f;
}
/// ((i * 13 + k * 7) % 97 - 48) / 32: the values PyTorch writes (safetensors_interop.py:
/// torch_value).
float torch_value(std::int64_t k, std::int64_t i) {
  return static_cast<float>((i * 13 + k * 7) % 97 - 48) / 32.0f;
}

const char* interop_dir() { return std::getenv("LOCKSTEP_INTEROP_DIR"); }

}  // namespace

TEST(SafetensorsInterop, WriteForPyTorch) {
  auto model = mlp();
  std::int64_t k = 0;
  for (const auto& item : model->state_dict()) {
    Tensor t = item.second;  // shares the parameter's data
    Tensor values = empty(t.shape());
    float* p = values.data_ptr<float>();
    for (std::int64_t i = 0; i < values.numel(); ++i) p[i] = ours_value(k, i);
    NoGradGuard no_grad;
    t.copy_(values);
    ++k;
  }
  const fs::path dir =
      interop_dir() ? fs::path(interop_dir()) : fs::path(LOCKSTEP_BINARY_DIR) / "io_test_tmp";
  fs::create_directories(dir);
  const std::string path = (dir / "ours.safetensors").string();
  st::save_state_dict(model->state_dict(), path, {{"format", "pt"}, {"writer", "lockstep"}});

  // Read back here as well, so that this test checks something without Python too.
  const st::File f = st::load_file(path);
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.at("0.weight").shape(), (Shape{256, 784}));
  EXPECT_EQ(f.at("2.bias").shape(), (Shape{10}));
  EXPECT_EQ(f.at("0.bias").data_ptr<float>()[5], ours_value(1, 5));
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(SafetensorsInterop, ReadFromPyTorch) {
  if (!interop_dir())
    GTEST_SKIP() << "LOCKSTEP_INTEROP_DIR not set: run by tests/io/safetensors_interop.py";
  const std::string path = (fs::path(interop_dir()) / "torch.safetensors").string();
  const st::File f = st::load_file(path);
  const std::vector<std::pair<std::string, Shape>> expected = {
      {"0.weight", {256, 784}}, {"0.bias", {256}}, {"2.weight", {10, 256}}, {"2.bias", {10}}};
  StateDict model_state;
  for (std::int64_t k = 0; k < 4; ++k) {
    const auto& [name, shape] = expected[k];
    const Tensor& t = f.at(name);
    ASSERT_EQ(t.shape(), shape) << name;
    ASSERT_EQ(t.dtype(), kFloat32) << name;
    const float* p = t.data_ptr<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      ASSERT_EQ(p[i], torch_value(k, i)) << name << " element " << i;
    model_state.insert(name, t);
  }
  // Extra dtypes and shapes written by PyTorch.
  EXPECT_EQ(f.at("step").dtype(), kInt64);
  EXPECT_EQ(f.at("step").dim(), 0);
  EXPECT_EQ(f.at("step").item<std::int64_t>(), 123456789012LL);
  EXPECT_EQ(f.at("f64").dtype(), kFloat64);
  EXPECT_EQ(f.at("f64").to_vector<double>(), (std::vector<double>{0.1, -2.5, 1e300}));
  EXPECT_EQ(f.at("empty").shape(), (Shape{0, 4}));
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("writer"), "pytorch");

  auto model = mlp();
  model->load_state_dict(model_state, /*strict=*/true);
  EXPECT_EQ(model->state_dict().at("2.weight").data_ptr<float>()[3], torch_value(2, 3));
}
