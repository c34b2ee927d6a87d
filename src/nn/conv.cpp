// nn::Conv2d (torch/nn/modules/conv.py).
#include "lockstep/nn/conv.h"

#include <cmath>

#include "lockstep/nn/init.h"

namespace lockstep::nn {

Conv2d::Conv2d(std::int64_t in, std::int64_t out, Size2 kernel, Size2 stride_, Size2 padding_,
               Size2 dilation_, std::int64_t groups_, bool bias_)
    : in_channels(in),
      out_channels(out),
      kernel_size(kernel),
      stride(stride_),
      padding(padding_),
      dilation(dilation_),
      groups(groups_),
      has_bias(bias_) {
  const std::string args = "Conv2d(" + std::to_string(in) + ", " + std::to_string(out) +
                           ", kernel_size=" + to_string(kernel) + ", stride=" + to_string(stride) +
                           ", padding=" + to_string(padding) + ", dilation=" +
                           to_string(dilation) + ", groups=" + std::to_string(groups) + ")";
  if (in < 1 || out < 1 || kernel[0] < 1 || kernel[1] < 1)
    throw ValueError(args + ": channel counts and kernel sizes must be positive");
  if (stride[0] < 1 || stride[1] < 1 || dilation[0] < 1 || dilation[1] < 1 || padding[0] < 0 ||
      padding[1] < 0)
    throw ValueError(args + ": stride and dilation must be >= 1 and padding >= 0");
  if (groups < 1 || in % groups != 0 || out % groups != 0)
    throw ValueError(args + ": groups must be positive and divide in_channels and out_channels");
  reset();
}

void Conv2d::reset() {
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / groups, kernel_size[0], kernel_size[1]}));
  init::linear_weight_(weight);  // kaiming_uniform_(a=√5): U(±1/√fan_in)
  if (has_bias) {
    bias = register_parameter("bias", empty({out_channels}));
    const double fan_in =
        static_cast<double>(in_channels / groups * kernel_size[0] * kernel_size[1]);
    const double bound = 1.0 / std::sqrt(fan_in);
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& input) {
  try {
    return conv2d(input, weight, bias, stride, padding, dilation, groups);
  } catch (const ShapeError& e) {
    throw ShapeError("Conv2d(" + std::to_string(in_channels) + ", " +
                     std::to_string(out_channels) + ", kernel_size=" + to_string(kernel_size) +
                     "): " + e.what());
  }
}

}  // namespace lockstep::nn
