// Bad input gets a typed error (a lockstep::Error subclass) whose message names the shapes,
// devices, dtypes or keys involved. One test per kind.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "lockstep/cuda/runtime.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

TEST(BadInput, MatmulShapeMismatch) {
  expect_error<ShapeError>([] { matmul(zeros({2, 3}), zeros({4, 5})); }, {"[2, 3]", "[4, 5]"});
  expect_error<ShapeError>([] { matmul(zeros({2, 3, 1}), zeros({3, 5})); }, {"[2, 3, 1]"});
  expect_error<ShapeError>([] { linear(zeros({4, 7}), zeros({5, 8})); }, {"[4, 7]", "[5, 8]"});
}

TEST(BadInput, LinearForwardShapeMismatch) {
  nn::Linear lin(10, 5);
  expect_error<ShapeError>([&] { lin.forward(zeros({4, 7})); }, {"[4, 7]", "[5, 10]"});
  expect_error<ShapeError>([&] { lin.forward(zeros({10, 4})); }, {"[10, 4]", "[5, 10]"});
}

TEST(BadInput, BroadcastShapeMismatch) {
  expect_error<ShapeError>([] { add(zeros({2, 3}), zeros({4})); }, {"[2, 3]", "[4]"});
  expect_error<ShapeError>([] { mse_loss(zeros({3}), zeros({3, 1})); }, {"[3]", "[3, 1]"});
}

TEST(BadInput, ClassIndexOutOfRange) {
  std::vector<std::int64_t> t{0, 1, 3, 2};
  Tensor target = tensor(std::span<const std::int64_t>(t));
  expect_error<IndexError>(
      [&] {
        cross_entropy(zeros({4, 3}), target);
      },
      {"row 2", "3", "3 classes"});
  std::vector<std::int64_t> neg{0, -1};
  expect_error<IndexError>(
      [&] {
        nn::CrossEntropyLoss()(zeros({2, 3}), tensor(std::span<const std::int64_t>(neg)));
      },
      {"row 1", "-1"});
  expect_error<ShapeError>([&] { cross_entropy(zeros({3, 3}), target); }, {"[4]", "[3, 3]"});
  expect_error<DTypeError>([&] { cross_entropy(zeros({4, 3}), zeros({4})); }, {"float32"});
}

TEST(BadInput, IndexOutOfRange) {
  std::vector<std::int64_t> idx{0, 5};
  expect_error<IndexError>(
      [&] {
        index_select(zeros({3, 2}), 0, tensor(std::span<const std::int64_t>(idx)));
      },
      {"5", "size 3"});
  expect_error<IndexError>([] { zeros({3, 2}).narrow(0, 2, 2); }, {"[3, 2]"});
  expect_error<IndexError>([] { sum(zeros({3, 2}), 2); }, {"dimension 2", "2-d"});
}

TEST(BadInput, BackwardOnNonScalar) {
  Tensor x = ones({3, 4}).requires_grad_(true);
  expect_error<AutogradError>([&] { mul(x, 2.0).backward(); }, {"[3, 4]"});
  expect_error<AutogradError>([] { zeros({2}).backward(); }, {"[2]", "require"});
  expect_error<ShapeError>([&] { mul(x, 2.0).backward(ones({4, 3})); }, {"[4, 3]", "[3, 4]"});
}

TEST(BadInput, UnparsableDeviceString) {
  for (std::string s : {"gpu:0", "cpu:-1", "cpu:x", "cuda:", "cpu:1x", "", "CPU", "cpu:0:1"})
    expect_error<DeviceError>([&] { Device::parse(s); }, {"'" + s + "'"});
  if (cuda::device_count() <= 2) {  // cuda:2 does not exist here
    expect_error<DeviceError>([] { zeros({2}, Device::parse("cuda:2")); }, {"cuda:2"});
  }
}

TEST(BadInput, StateDictMissingUnexpectedWrongShape) {
  auto fresh = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(3, 2)});
  };
  auto model = fresh();
  StateDict missing;
  for (auto& [k, v] : model->state_dict())
    if (k != "2.weight") missing.insert(k, v);
  expect_error<StateDictError>([&] { fresh()->load_state_dict(missing); },
                               {"missing", "'2.weight'"});
  StateDict extra = model->state_dict();
  extra.insert("3.bias", zeros({2}));
  expect_error<StateDictError>([&] { fresh()->load_state_dict(extra); },
                               {"unexpected", "'3.bias'"});
  StateDict wrong = model->state_dict();
  wrong.insert("0.weight", zeros({3, 5}));
  expect_error<StateDictError>([&] { fresh()->load_state_dict(wrong); },
                               {"'0.weight'", "[3, 5]", "[3, 4]"});
  expect_error<StateDictError>([&] { model->state_dict().at("9.weight"); }, {"'9.weight'"});
}

TEST(BadInput, OpsAcrossDevices) {
  Tensor a = ones({2, 2}, cpu(0)), b = ones({2, 2}, cpu(1));
  expect_error<DeviceError>([&] { add(a, b); }, {"cpu:0", "cpu:1"});
  expect_error<DeviceError>([&] { matmul(a, b); }, {"cpu:0", "cpu:1"});
  nn::Linear lin(2, 3);
  expect_error<DeviceError>([&] { lin.forward(b); }, {"cpu:0", "cpu:1"});
  std::vector<std::int64_t> t{0, 1};
  expect_error<DeviceError>(
      [&] { cross_entropy(a, tensor(std::span<const std::int64_t>(t)).to(cpu(1))); },
      {"cpu:0", "cpu:1"});
}

TEST(BadInput, DTypeMismatch) {
  expect_error<DTypeError>([] { add(zeros({2}), zeros({2}, kFloat64)); }, {"float32", "float64"});
  expect_error<DTypeError>(
      [] {
        matmul(zeros({2, 2}), zeros({2, 2}, kFloat64));
      },
      {"float32", "float64"});
  expect_error<DTypeError>([] { exp(arange(3)); }, {"int64", "[3]"});
  expect_error<DTypeError>([] { zeros({2}).data_ptr<double>(); }, {"float32", "float64", "[2]"});
}

TEST(BadInput, InvalidValues) {
  expect_error<ValueError>([] { dropout(ones({2}), 1.5, true); }, {"1.5"});
  expect_error<ValueError>([] { tensor_split(ones({2}), 0); }, {"0"});
  expect_error<ValueError>([] { Tensor().numel(); }, {"undefined"});
}

// A start near INT64_MAX made start + length overflow past the range check: narrow returned a
// [2, 2] copy read from outside the tensor (along dim 1) and a [INT64_MAX, 3] view of foreign
// memory (along dim 0). torch.narrow raises for both.
TEST(BadInput, NarrowRangeWhoseEndOverflowsIsRefused) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  expect_error<IndexError>(
      [] {
        narrow(ones({2, 3}), 1, kMax, 2);
      },
      {"narrow", "dimension 1 of size 3", "[2, 3]"});
  expect_error<IndexError>(
      [] {
        narrow(ones({2, 3}), 0, 1, kMax);
      },
      {"narrow", "dimension 0 of size 2"});
  expect_error<IndexError>([] { ones({2, 3}).narrow(1, 4, 0); }, {"[4, 4)", "size 3"});
  EXPECT_EQ(narrow(ones({2, 3}), 1, 3, 0).shape(), (Shape{2, 0}));  // an empty end slice is fine
}

}  // namespace
}  // namespace lockstep::testing
