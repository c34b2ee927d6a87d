// lockstep.models' C++ half: nanoGPT's GPT and the CIFAR ResNet-20 of include/lockstep/nn/gpt.h
// and resnet.h, with their blocks, so a child reached by attribute (model.layer1[0],
// model.transformer.h[0].attn) is shown by its class. python/lockstep/models.py gives them
// nanoGPT's and torchvision's Python signatures (GPTConfig, forward(idx, targets), generate,
// configure_optimizers, resnet20(num_classes=...)).
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "bind.h"
#include "lockstep/nn/gpt.h"
#include "lockstep/nn/resnet.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;
using nn::Module;

// transformer and transformer.h: torch's ModuleDict by key, and ModuleList by position where
// the keys are "0" ... "n-1" (nanoGPT's `for block in self.transformer.h`, `h[0]`).
std::shared_ptr<Module> child_at(const nn::ModuleDict& d, nb::handle key) {
  const auto children = d.named_children();
  if (nb::isinstance<nb::int_>(key)) {
    const auto n = static_cast<std::int64_t>(children.size());
    std::int64_t i = nb::cast<std::int64_t>(key);
    if (i < -n || i >= n)
      throw IndexError("index " + std::to_string(i) + " is out of range for " + std::to_string(n) +
                       " modules");
    return children[static_cast<std::size_t>(i < 0 ? i + n : i)].second;
  }
  const std::string k = nb::cast<std::string>(key);
  for (const auto& [name, c] : children)
    if (name == k) return c;
  throw nb::key_error(k.c_str());
}

}  // namespace

void bind_models(nb::module_& m) {
  nb::class_<nn::GPTConfig>(m, "_GPTConfig")
      .def(nb::init<>())
      .def_rw("block_size", &nn::GPTConfig::block_size)
      .def_rw("vocab_size", &nn::GPTConfig::vocab_size)
      .def_rw("n_layer", &nn::GPTConfig::n_layer)
      .def_rw("n_head", &nn::GPTConfig::n_head)
      .def_rw("n_embd", &nn::GPTConfig::n_embd)
      .def_rw("dropout", &nn::GPTConfig::dropout)
      .def_rw("bias", &nn::GPTConfig::bias);
  nb::class_<nn::ModuleDict, Module>(m, "_ModuleDict")
      .def("__getitem__", &child_at, "key"_a)
      .def("__len__", [](const nn::ModuleDict& d) { return d.named_children().size(); })
      .def("keys", [](const nn::ModuleDict& d) {
        nb::list out;
        for (const auto& [k, c] : d.named_children()) out.append(nb::str(k.c_str()));
        return out;
      });
  nb::class_<nn::CausalSelfAttention, Module>(m, "CausalSelfAttention");
  nb::class_<nn::MLP, Module>(m, "MLP");
  nb::class_<nn::Block, Module>(m, "Block");
  nb::class_<nn::GPT, Module>(m, "_GPT",
      "nanoGPT's GPT (include/lockstep/nn/gpt.h); forward(idx [B, T] int64) gives the logits "
      "[B, T, vocab_size] of every position.")
      .def(nb::init<const nn::GPTConfig&>(), "config"_a)
      .def("get_num_params", &nn::GPT::get_num_params, "non_embedding"_a = true,
           "nanoGPT's count: the tied embedding once, minus transformer.wpe.weight when "
           "non_embedding.");
  m.def("gpt_loss", &nn::gpt_loss, "logits"_a, "targets"_a, "ignore_index"_a = -1,
        "nanoGPT's loss: cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index).");

  nb::class_<nn::BasicBlock, Module>(m, "BasicBlock")
      .def(nb::init<std::int64_t, std::int64_t, std::int64_t>(), "inplanes"_a, "planes"_a,
           "stride"_a = 1);
  nb::class_<nn::ResNet, Module>(m, "ResNet")
      .def(nb::init<std::array<std::int64_t, 3>, std::int64_t, std::int64_t>(), "layers"_a,
           "in_channels"_a = 1, "num_classes"_a = 10)
      .def_ro("in_channels", &nn::ResNet::in_channels)
      .def_ro("num_classes", &nn::ResNet::num_classes);
  m.def("resnet20", &nn::resnet20, "in_channels"_a = 1, "num_classes"_a = 10);
}

}  // namespace lockstep::python
