// nn::BasicBlock and nn::ResNet: He et al. 2016's CIFAR ResNet (section 4.2) with torchvision's
// names (torchvision/models/resnet.py), PyTorch's default initialisation.
#include "lockstep/nn/resnet.h"

#include <string>

#include "lockstep/ops/ops.h"
#include "lockstep/ops/pool.h"

namespace lockstep::nn {

namespace {

// torchvision's conv3x3 and conv1x1: no bias (a BatchNorm follows each).
std::shared_ptr<Conv2d> conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return std::make_shared<Conv2d>(in, out, Size2{3, 3}, Size2{stride, stride}, Size2{1, 1},
                                  Size2{1, 1}, 1, false);
}

std::shared_ptr<Conv2d> conv1x1(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return std::make_shared<Conv2d>(in, out, Size2{1, 1}, Size2{stride, stride}, Size2{0, 0},
                                  Size2{1, 1}, 1, false);
}

}  // namespace

BasicBlock::BasicBlock(std::int64_t in_planes_, std::int64_t planes_, std::int64_t stride_)
    : in_planes(in_planes_), planes(planes_), stride(stride_) {
  if (in_planes < 1 || planes < 1 || stride < 1)
    throw ValueError("BasicBlock(" + std::to_string(in_planes) + ", " + std::to_string(planes) +
                     ", stride=" + std::to_string(stride) +
                     "): channel counts and stride must be positive");
  reset();
}

void BasicBlock::reset() {
  // Registration order is torchvision's (conv1, bn1, conv2, bn2, downsample), so state_dict
  // keys come in PyTorch's order; the projection shortcut is built first, as torchvision's
  // _make_layer builds it before the block, so the weights are drawn in PyTorch's order.
  std::shared_ptr<Sequential> shortcut;
  if (stride != 1 || in_planes != planes)
    shortcut = std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
        conv1x1(in_planes, planes, stride), std::make_shared<BatchNorm2d>(planes)});
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  downsample.reset();
  if (shortcut) downsample = register_module("downsample", shortcut);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = relu(bn1->forward(conv1->forward(x)));
  out = bn2->forward(conv2->forward(out));
  return relu(add(out, downsample ? downsample->forward(x) : x));
}

ResNet::ResNet(std::array<std::int64_t, 3> layers_, std::int64_t in_channels_,
               std::int64_t num_classes_)
    : layers(layers_), in_channels(in_channels_), num_classes(num_classes_) {
  if (in_channels < 1 || num_classes < 1 || layers[0] < 1 || layers[1] < 1 || layers[2] < 1)
    throw ValueError("ResNet(layers={" + std::to_string(layers[0]) + ", " +
                     std::to_string(layers[1]) + ", " + std::to_string(layers[2]) +
                     "}, in_channels=" + std::to_string(in_channels) +
                     ", num_classes=" + std::to_string(num_classes) +
                     "): block counts, in_channels and num_classes must be positive");
  reset();
}

void ResNet::reset() {
  conv1 = register_module("conv1", conv3x3(in_channels, 16, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(16));
  // torchvision's _make_layer: the first block of a stage changes stride and width, the rest
  // keep them.
  std::int64_t in_planes = 16;
  auto make_layer = [&](const char* name, std::int64_t planes, std::int64_t blocks,
                        std::int64_t stride) {
    auto layer = std::make_shared<Sequential>();
    layer->push_back(std::make_shared<BasicBlock>(in_planes, planes, stride));
    in_planes = planes;
    for (std::int64_t b = 1; b < blocks; ++b)
      layer->push_back(std::make_shared<BasicBlock>(in_planes, planes, 1));
    return register_module(name, layer);
  };
  layer1 = make_layer("layer1", 16, layers[0], 1);
  layer2 = make_layer("layer2", 32, layers[1], 2);
  layer3 = make_layer("layer3", 64, layers[2], 2);
  fc = register_module("fc", std::make_shared<Linear>(64, num_classes));
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = relu(bn1->forward(conv1->forward(x)));
  h = layer3->forward(layer2->forward(layer1->forward(h)));
  h = flatten(adaptive_avg_pool2d(h, {1, 1}), 1);
  return fc->forward(h);
}

std::shared_ptr<ResNet> resnet20(std::int64_t in_channels, std::int64_t num_classes) {
  return std::make_shared<ResNet>(std::array<std::int64_t, 3>{3, 3, 3}, in_channels, num_classes);
}

}  // namespace lockstep::nn
