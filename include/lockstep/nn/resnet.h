// nn::BasicBlock and nn::ResNet: the CIFAR-style residual network of He et al., "Deep Residual
// Learning for Image Recognition" (CVPR 2016), section 4.2, with torchvision's module names
// (torchvision/models/resnet.py: conv1, bn1, layer1.0.conv1, ..., layerK.0.downsample.0, fc), so
// state_dict keys, safetensors checkpoints and `--init` files are interchangeable with a PyTorch
// model built the same way (tests/data/resnet/make_resnet_golden.py defines it).
//
// Differences from torchvision's ImageNet ResNet, all from the paper's CIFAR variant: a 3x3
// stride-1 stem without max pooling, three stages of 16, 32 and 64 channels (not four of 64 to
// 512), and a configurable number of input channels. Shortcuts where the shape changes are
// projections (the paper's option B: a 1x1 convolution with stride 2, no bias, then BatchNorm2d),
// as torchvision's; identity everywhere else.
//
// Initialisation: every layer keeps PyTorch's default initialisation (Conv2d and Linear:
// kaiming_uniform_(a=√5), i.e. U(±1/√fan_in), Linear's bias U(±1/√fan_in); BatchNorm2d: weight 1,
// bias 0). torchvision's ResNet re-initialises its convolutions with kaiming_normal_(mode=
// 'fan_out') and BatchNorm with constants afterwards; this model does NOT, and neither does the
// PyTorch model it is tested against.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "lockstep/nn/batch_norm.h"
#include "lockstep/nn/conv.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/module.h"
#include "lockstep/nn/sequential.h"

namespace lockstep::nn {

/// torchvision's BasicBlock (expansion 1): children `conv1` (3x3, stride `stride`, padding 1,
/// no bias), `bn1`, `conv2` (3x3, stride 1, padding 1, no bias), `bn2` and, when stride != 1 or
/// in_planes != planes, `downsample`, a Sequential of a 1x1 Conv2d (stride `stride`, no bias)
/// `downsample.0` and a BatchNorm2d `downsample.1`.
///   out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)),
/// shortcut = downsample (when present) or the identity.
class BasicBlock : public Cloneable<BasicBlock> {
 public:
  /// ValueError naming the arguments for in_planes, planes or stride < 1.
  BasicBlock(std::int64_t in_planes, std::int64_t planes, std::int64_t stride = 1);

  /// input [N, in_planes, H, W] float32/float64 -> [N, planes, H_out, W_out],
  /// H_out = floor((H − 1) / stride) + 1 (W alike). Errors: the children's, each naming its
  /// layer (Conv2d's ShapeError for a rank other than 4 or a wrong channel count, BatchNorm2d's
  /// ValueError for one value per channel in training).
  Tensor forward(const Tensor& input) override;
  void reset() override;
  std::string name() const override { return "BasicBlock"; }

  std::int64_t in_planes, planes, stride;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> downsample;  // null for an identity shortcut
};

/// The CIFAR ResNet of He et al. 2016, section 4.2, depth 6n + 2 for `layers` = {n, n, n}:
///   conv1 (3x3, in_channels -> 16, stride 1, padding 1, no bias), bn1, relu,
///   layer1 (layers[0] BasicBlocks, 16 channels, stride 1),
///   layer2 (layers[1] BasicBlocks, 32 channels, the first with stride 2 and a projection),
///   layer3 (layers[2] BasicBlocks, 64 channels, the first with stride 2 and a projection),
///   adaptive_avg_pool2d to 1x1, flatten, fc (Linear(64, num_classes)).
/// layer1 ... layer3 are Sequentials, so names follow torchvision: `layer2.0.downsample.1.weight`.
/// Not a Sequential itself (blocks add their shortcut), but clone() works (Cloneable): a clone has
/// its own copies of every parameter and buffer, and the same training flags.
class ResNet : public Cloneable<ResNet> {
 public:
  /// ValueError naming the arguments for in_channels, num_classes or a block count < 1.
  explicit ResNet(std::array<std::int64_t, 3> layers = {3, 3, 3}, std::int64_t in_channels = 1,
                  std::int64_t num_classes = 10);

  /// input [N, in_channels, H, W] float32/float64 (Fashion-MNIST: [N, 1, 28, 28]) -> logits
  /// [N, num_classes], same dtype. Spatial size: H through layer1, ceil(H / 2) through layer2,
  /// ceil(H / 4) through layer3 (28 -> 28 -> 14 -> 7), then averaged to 1x1.
  /// Errors: ShapeError from `conv1` (naming the layer, "Conv2d(1, 16, kernel_size=(3, 3))",
  /// and the input's shape) for an input that is not 4-d or has a channel count other than
  /// in_channels; ValueError from a BatchNorm2d (naming it) when a channel has one value in
  /// training (e.g. N = 1 with an image of at most 4x4); DTypeError for a non-float input.
  Tensor forward(const Tensor& input) override;
  void reset() override;
  std::string name() const override { return "ResNet"; }

  std::array<std::int64_t, 3> layers;
  std::int64_t in_channels, num_classes;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3;
  std::shared_ptr<Linear> fc;
};

/// ResNet-20 (He et al. 2016, section 4.2, n = 3): ResNet({3, 3, 3}, in_channels, num_classes),
/// PyTorch's default initialisation drawn from the default generator (lockstep::manual_seed) in
/// torchvision's order (an MT19937 default generator gives torch.manual_seed's weights bitwise).
/// 272,186 parameters for in_channels = 1 and num_classes = 10 (272,474 for 3 input channels),
/// and 21 BatchNorm2d layers, each with running_mean, running_var and num_batches_tracked
/// buffers. ValueError as ResNet's constructor.
std::shared_ptr<ResNet> resnet20(std::int64_t in_channels = 1, std::int64_t num_classes = 10);

}  // namespace lockstep::nn
