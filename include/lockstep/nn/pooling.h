// Pooling and flattening modules, no parameters: nn::MaxPool2d, AvgPool2d, AdaptiveAvgPool2d
// (torch/nn/modules/pooling.py) and nn::Flatten (torch/nn/modules/flatten.py).
#pragma once

#include <optional>

#include "lockstep/nn/module.h"
#include "lockstep/ops/pool.h"

namespace lockstep::nn {

/// lockstep::max_pool2d; stride defaults to the kernel (torch.nn.MaxPool2d(2)).
class MaxPool2d : public Cloneable<MaxPool2d> {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = {0, 0});
  explicit MaxPool2d(std::int64_t kernel_size) : MaxPool2d(Size2{kernel_size, kernel_size}) {}
  Tensor forward(const Tensor& x) override;
  void reset() override {}
  std::string name() const override { return "MaxPool2d"; }
  Size2 kernel_size;
  std::optional<Size2> stride;
  Size2 padding;
};

/// lockstep::avg_pool2d with PyTorch's defaults (count_include_pad, floor).
class AvgPool2d : public Cloneable<AvgPool2d> {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = {0, 0});
  explicit AvgPool2d(std::int64_t kernel_size) : AvgPool2d(Size2{kernel_size, kernel_size}) {}
  Tensor forward(const Tensor& x) override;
  void reset() override {}
  std::string name() const override { return "AvgPool2d"; }
  Size2 kernel_size;
  std::optional<Size2> stride;
  Size2 padding;
};

/// lockstep::adaptive_avg_pool2d to a fixed output size (torch.nn.AdaptiveAvgPool2d((1, 1))).
class AdaptiveAvgPool2d : public Cloneable<AdaptiveAvgPool2d> {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  explicit AdaptiveAvgPool2d(std::int64_t output_size)
      : AdaptiveAvgPool2d(Size2{output_size, output_size}) {}
  Tensor forward(const Tensor& x) override;
  void reset() override {}
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  Size2 output_size;
};

/// lockstep::flatten of dims [start_dim, end_dim]; torch.nn.Flatten's defaults keep the batch
/// dimension (start_dim 1): [N, C, H, W] -> [N, C·H·W].
class Flatten : public Cloneable<Flatten> {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  void reset() override {}
  std::string name() const override { return "Flatten"; }
  int start_dim, end_dim;
};

}  // namespace lockstep::nn
