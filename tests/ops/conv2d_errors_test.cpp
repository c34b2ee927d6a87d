// conv2d's bad inputs (lockstep/ops/conv.h): every one the docstring lists gives its typed error
// (ShapeError, ValueError, DTypeError) naming the shapes and what to fix.
#include <gtest/gtest.h>

#include "conv_cases.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

// One call's arguments (float32 zeros; no bias when `b` is empty) and what its message names.
struct Bad {
  Shape x, w, b;
  Size2 stride{1, 1}, padding{0, 0}, dilation{1, 1};
  std::int64_t groups = 1;
  std::vector<std::string> parts;
};

template <class E>
void expect_all(const std::vector<Bad>& cases) {
  for (const Bad& c : cases) {
    SCOPED_TRACE("input " + c.x.str() + ", weight " + c.w.str());
    const Tensor b = c.b.size() > 0 ? zeros(c.b) : Tensor();
    expect_error<E>(
        [&] { conv2d(zeros(c.x), zeros(c.w), b, c.stride, c.padding, c.dilation, c.groups); },
        c.parts);
  }
}

TEST(Conv2dErrors, ShapesAreCheckedAndNamed) {
  const Shape x{2, 4, 5, 5}, w{3, 4, 3, 3};
  // clang-format off
  expect_all<ShapeError>({
      {{4, 5, 5}, w, {}, {1, 1}, {0, 0}, {1, 1}, 1, {"conv2d", "4-d input", "[4, 5, 5]", "[1, C, H, W]"}},
      {{2, 4, 5, 5, 1}, w, {}, {1, 1}, {0, 0}, {1, 1}, 1, {"4-d input", "[2, 4, 5, 5, 1]"}},
      {x, {3, 4, 3}, {}, {1, 1}, {0, 0}, {1, 1}, 1, {"4-d weight", "[3, 4, 3]"}},
      {x, {3, 3, 3, 3}, {}, {1, 1}, {0, 0}, {1, 1}, 1,
       {"expected input with C_in = weight.size(1)·groups", "3·1 = 3", "[2, 4, 5, 5]", "[3, 3, 3, 3]"}},
      {x, {3, 2, 3, 3}, {}, {1, 1}, {0, 0}, {1, 1}, 3, {"C_in = weight.size(1)·groups", "2·3 = 6", "[2, 4, 5, 5]"}},
      {x, {3, 2, 3, 3}, {}, {1, 1}, {0, 0}, {1, 1}, 2, {"[3, 2, 3, 3]", "C_out = 3", "not divisible by groups = 2"}},
      {x, w, {4}, {1, 1}, {0, 0}, {1, 1}, 1, {"bias [4]", "[3, 4, 3, 3]", "expected [3]"}},
      {x, w, {1, 3}, {1, 1}, {0, 0}, {1, 1}, 1, {"bias [1, 3]", "expected [3]"}},
      {{1, 4, 2, 5}, w, {}, {1, 1}, {0, 0}, {1, 1}, 1,
       {"kernel 3x3", "larger than the padded input 2x5", "[1, 4, 2, 5]", "[3, 4, 3, 3]"}},
      {{1, 4, 4, 4}, w, {}, {1, 1}, {0, 0}, {2, 2}, 1,
       {"dilated to 5x5", "dilation (2, 2)", "padded input 4x4", "[1, 4, 4, 4]"}},
      {x, {3, 4, 0, 3}, {}, {1, 1}, {0, 0}, {1, 1}, 1, {"[3, 4, 0, 3]", "empty kernel"}},
  });
  // clang-format on
  // padding makes the kernel fit: 2 + 2·1 = 4 >= 3
  EXPECT_EQ(conv2d(zeros({1, 4, 2, 2}), zeros(w), Tensor(), {1, 1}, {1, 1}).shape(),
            (Shape{1, 3, 2, 2}));
}

TEST(Conv2dErrors, ParametersAreValueErrors) {
  const Shape x{1, 2, 5, 5}, w{3, 2, 3, 3};
  // clang-format off
  expect_all<ValueError>({
      {x, w, {}, {0, 1}, {0, 0}, {1, 1}, 1, {"conv2d", "stride", "(0, 1)"}},
      {x, w, {}, {1, 1}, {0, -1}, {1, 1}, 1, {"padding", "(0, -1)"}},
      {x, w, {}, {1, 1}, {0, 0}, {1, 0}, 1, {"dilation", "(1, 0)"}},
      {x, w, {}, {1, 1}, {0, 0}, {1, 1}, 0, {"groups", "got 0"}},
  });
  // clang-format on
  expect_error<ValueError>([&] { conv2d(zeros(x), Tensor()); }, {"conv2d", "undefined"});
}

TEST(Conv2dErrors, DTypesMustMatchAndBeFloating) {
  const Tensor x = zeros({1, 2, 5, 5}), w = zeros({3, 2, 3, 3});
  const TensorOptions f64(kFloat64), i64(kInt64);
  expect_error<DTypeError>([&] { conv2d(x, w.to(kFloat64)); }, {"conv2d", "float32", "float64"});
  expect_error<DTypeError>([&] { conv2d(x, w, zeros({3}, f64)); }, {"conv2d", "float64"});
  expect_error<DTypeError>(
      [&] {
        conv2d(zeros({1, 2, 5, 5}, i64), zeros({3, 2, 3, 3}, i64));
      },
      {"conv2d", "int64"});
}

}  // namespace
}  // namespace lockstep::testing
