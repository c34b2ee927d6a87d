// lockstep.nn's built-in layers (the C++ modules of include/lockstep/nn/, constructors with
// torch's argument names; python/lockstep/nn/layers.py widens torch's int-or-pair spellings),
// nn.init and nn.utils.clip_grad_norm_.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/nn/activation.h"
#include "lockstep/nn/batch_norm.h"
#include "lockstep/nn/conv.h"
#include "lockstep/nn/dropout.h"
#include "lockstep/nn/embedding.h"
#include "lockstep/nn/init.h"
#include "lockstep/nn/layer_norm.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/pooling.h"
#include "lockstep/nn/sequential.h"
#include "lockstep/nn/sync_batch_norm.h"
#include "lockstep/nn/utils.h"

namespace lockstep::python {

void bind_layers(nb::module_& m) {
  using namespace nb::literals;
  using nn::Module;
  using ModulePtr = std::shared_ptr<Module>;
  nb::class_<nn::Linear, Module>(m, "Linear", "y = x Wᵀ + b (torch.nn.Linear); weight [out, in].")
      .def(nb::init<std::int64_t, std::int64_t, bool>(), "in_features"_a, "out_features"_a, "bias"_a = true)
      .def_ro("in_features", &nn::Linear::in_features)
      .def_ro("out_features", &nn::Linear::out_features);
  nb::class_<nn::ReLU, Module>(m, "ReLU").def("__init__", [](nn::ReLU* r, bool) { new (r) nn::ReLU(); },
                                              "inplace"_a = false);
  nb::class_<nn::Tanh, Module>(m, "Tanh").def(nb::init<>());
  nb::class_<nn::Sigmoid, Module>(m, "Sigmoid").def(nb::init<>());
  nb::class_<nn::GELU, Module>(m, "GELU").def(nb::init<std::string>(), "approximate"_a = "none");
  nb::class_<nn::Dropout, Module>(m, "Dropout")
      .def("__init__", [](nn::Dropout* d, double p, bool) { new (d) nn::Dropout(p); }, "p"_a = 0.5,
           "inplace"_a = false)
      .def_ro("p", &nn::Dropout::p);
  nb::class_<nn::Flatten, Module>(m, "Flatten").def(nb::init<int, int>(), "start_dim"_a = 1, "end_dim"_a = -1);
  nb::class_<nn::Conv2d, Module>(m, "Conv2d")
      .def(nb::init<std::int64_t, std::int64_t, Size2, Size2, Size2, Size2, std::int64_t, bool>(),
           "in_channels"_a, "out_channels"_a, "kernel_size"_a, "stride"_a, "padding"_a,
           "dilation"_a, "groups"_a, "bias"_a);
  nb::class_<nn::MaxPool2d, Module>(m, "MaxPool2d")
      .def(nb::init<Size2, std::optional<Size2>, Size2>(), "kernel_size"_a, "stride"_a.none(), "padding"_a);
  nb::class_<nn::AvgPool2d, Module>(m, "AvgPool2d")
      .def(nb::init<Size2, std::optional<Size2>, Size2>(), "kernel_size"_a, "stride"_a.none(), "padding"_a);
  nb::class_<nn::AdaptiveAvgPool2d, Module>(m, "AdaptiveAvgPool2d").def(nb::init<Size2>(), "output_size"_a);
  nb::class_<nn::BatchNormBase, Module>(m, "_BatchNorm")
      .def_prop_ro("synchronized", &nn::BatchNormBase::synchronized,
                   "Whether training statistics span every replica (SyncBatchNorm, or after "
                   "convert_sync_batchnorm, which switches BatchNorm layers in place).");
  nb::class_<nn::BatchNorm1d, nn::BatchNormBase>(m, "BatchNorm1d")
      .def(nb::init<std::int64_t, double, std::optional<double>, bool, bool>(), "num_features"_a,
           "eps"_a = 1e-5, "momentum"_a.none() = 0.1, "affine"_a = true, "track_running_stats"_a = true);
  nb::class_<nn::BatchNorm2d, nn::BatchNormBase>(m, "BatchNorm2d")
      .def(nb::init<std::int64_t, double, std::optional<double>, bool, bool>(), "num_features"_a,
           "eps"_a = 1e-5, "momentum"_a.none() = 0.1, "affine"_a = true, "track_running_stats"_a = true);
  nb::class_<nn::SyncBatchNorm, nn::BatchNormBase>(m, "SyncBatchNorm")
      .def(nb::init<std::int64_t, double, std::optional<double>, bool, bool>(), "num_features"_a,
           "eps"_a = 1e-5, "momentum"_a.none() = 0.1, "affine"_a = true, "track_running_stats"_a = true);
  m.def("convert_sync_batchnorm", &nn::convert_sync_batchnorm, "module"_a);
  nb::class_<nn::LayerNorm, Module>(m, "LayerNorm")
      .def("__init__", [](nn::LayerNorm* l, std::vector<std::int64_t> shape, double eps, bool affine, bool bias) {
        new (l) nn::LayerNorm(Shape(shape), eps, affine, bias);
      }, "normalized_shape"_a, "eps"_a = 1e-5, "elementwise_affine"_a = true, "bias"_a = true);
  nb::class_<nn::Embedding, Module>(m, "Embedding")
      .def(nb::init<std::int64_t, std::int64_t>(), "num_embeddings"_a, "embedding_dim"_a);
  nb::class_<nn::Sequential, Module>(m, "_Sequential").def(nb::init<>()).def("append", [](nb::handle self, ModulePtr c) {
    nb::cast<nn::Sequential&>(self).push_back(std::move(c));
    return nb::borrow(self);
  }, "module"_a);

  nb::module_ init = m.def_submodule("init", "torch.nn.init over the default generator");
  init.def("uniform_", [](Tensor t, double a, double b, Generator* g) {
    NoGradGuard ng;
    nn::init::uniform_(t, a, b, g);
    return t;
  }, "tensor"_a, "a"_a = 0.0, "b"_a = 1.0, "generator"_a = nb::none());
  init.def("normal_", [](Tensor t, double mean, double std, Generator* g) {
    NoGradGuard ng;
    nn::init::normal_(t, mean, std, g);
    return t;
  }, "tensor"_a, "mean"_a = 0.0, "std"_a = 1.0, "generator"_a = nb::none());

  m.def("clip_grad_norm_", [](nb::handle params, double max_norm, double norm_type) {
    std::vector<Tensor> ps;
    if (nb::isinstance<Tensor>(params)) ps.push_back(nb::cast<Tensor>(params));
    else for (nb::handle h : params) ps.push_back(nb::cast<Tensor>(h));
    return nn::utils::clip_grad_norm_(ps, max_norm, norm_type);
  }, "parameters"_a, "max_norm"_a, "norm_type"_a = 2.0);
}

}  // namespace lockstep::python
