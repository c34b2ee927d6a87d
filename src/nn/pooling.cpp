// nn::MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and Flatten: argument checks at construction (the
// ops' own rules, so a bad layer fails when it is made, not at its first batch) and the layer
// named in the ops' shape errors.
#include "lockstep/nn/pooling.h"

#include "lockstep/ops/ops.h"

namespace lockstep::nn {

namespace {

std::string pool_str(const char* name, Size2 kernel, const std::optional<Size2>& stride,
                     Size2 padding) {
  return std::string(name) + "(kernel_size=" + to_string(kernel) +
         ", stride=" + to_string(stride.value_or(kernel)) + ", padding=" + to_string(padding) + ")";
}

void check_pool(const char* name, Size2 kernel, const std::optional<Size2>& stride,
                Size2 padding) {
  const Size2 s = stride.value_or(kernel);
  for (int d = 0; d < 2; ++d) {
    if (kernel[d] < 1 || s[d] < 1 || padding[d] < 0)
      throw ValueError(pool_str(name, kernel, stride, padding) +
                       ": kernel and stride must be >= 1 and padding >= 0");
    if (padding[d] > kernel[d] / 2)
      throw ValueError(pool_str(name, kernel, stride, padding) +
                       ": padding should be at most half of the kernel size");
  }
}

// The op's ShapeError with the layer named.
template <class F>
Tensor named(const std::string& layer, F&& f) {
  try {
    return f();
  } catch (const ShapeError& e) {
    throw ShapeError(layer + ": " + e.what());
  }
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 k, std::optional<Size2> s, Size2 p)
    : kernel_size(k), stride(s), padding(p) {
  check_pool("MaxPool2d", k, s, p);
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return named(pool_str("MaxPool2d", kernel_size, stride, padding),
               [&] { return max_pool2d(x, kernel_size, stride, padding); });
}

AvgPool2d::AvgPool2d(Size2 k, std::optional<Size2> s, Size2 p)
    : kernel_size(k), stride(s), padding(p) {
  check_pool("AvgPool2d", k, s, p);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return named(pool_str("AvgPool2d", kernel_size, stride, padding),
               [&] { return avg_pool2d(x, kernel_size, stride, padding); });
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 o) : output_size(o) {
  if (o[0] < 1 || o[1] < 1)
    throw ValueError("AdaptiveAvgPool2d(" + to_string(o) + "): the output size must be >= 1");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  return named("AdaptiveAvgPool2d(" + to_string(output_size) + ")",
               [&] { return adaptive_avg_pool2d(x, output_size); });
}

Tensor Flatten::forward(const Tensor& x) {
  try {
    return flatten(x, start_dim, end_dim);
  } catch (const IndexError& e) {
    throw IndexError("Flatten(start_dim=" + std::to_string(start_dim) +
                     ", end_dim=" + std::to_string(end_dim) + "): " + e.what());
  }
}

}  // namespace lockstep::nn
