// lockstep.optim's C++ half: the optimizers and LR schedulers of include/lockstep/optim/.
// lockstep/optim/__init__.py wraps them with torch's signatures and mutable param_groups.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "lockstep/optim/adam.h"
#include "lockstep/optim/lr_scheduler.h"
#include "lockstep/optim/sgd.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;
using namespace lockstep::optim;

std::vector<ParamGroup> groups_of(const std::vector<std::vector<Tensor>>& params,
                                  const std::vector<std::optional<double>>& weight_decay) {
  std::vector<ParamGroup> groups;
  for (std::size_t i = 0; i < params.size(); ++i)
    groups.push_back(ParamGroup{params[i], i < weight_decay.size() ? weight_decay[i] : std::nullopt});
  return groups;
}

// Adam and AdamW take the same arguments: parameter groups, each group's weight decay, the rest.
template <class Opt, class Options, class Base>
void bind_adam(nb::module_& m, const char* name) {
  nb::class_<Opt, Base>(m, name).def(
      "__init__",
      [](Opt* o, std::vector<std::vector<Tensor>> params, std::vector<std::optional<double>> wd,
         double lr, double b1, double b2, double eps, double weight_decay) {
        new (o) Opt(groups_of(params, wd), Options{lr, b1, b2, eps, weight_decay});
      },
      "groups"_a, "group_weight_decay"_a, "lr"_a, "beta1"_a, "beta2"_a, "eps"_a, "weight_decay"_a);
}

}  // namespace

void bind_optim(nb::module_& m) {
  nb::class_<Optimizer>(m, "_Optimizer")
      .def("step", [](Optimizer& o) {
        nb::gil_scoped_release r;
        o.step();
      })
      .def("zero_grad", &Optimizer::zero_grad, "set_to_none"_a = true)
      .def_prop_ro("lr", &Optimizer::lr)
      .def("set_lr", &Optimizer::set_lr, "lr"_a)
      .def("state_dict", [](const Optimizer& o) { return from_state_dict(o.state_dict()); })
      .def("load_state_dict", [](Optimizer& o, nb::dict d) { o.load_state_dict(to_state_dict(d)); },
           "state_dict"_a);
  nb::class_<SGD, Optimizer>(m, "_SGD")
      .def("__init__", [](SGD* o, std::vector<Tensor> params, double lr, double momentum,
                          double dampening, double weight_decay, bool nesterov) {
        new (o) SGD(std::move(params), SGDOptions{lr, momentum, dampening, weight_decay, nesterov});
      }, "params"_a, "lr"_a, "momentum"_a, "dampening"_a, "weight_decay"_a, "nesterov"_a);
  bind_adam<Adam, AdamOptions, Optimizer>(m, "_Adam");
  bind_adam<AdamW, AdamWOptions, Adam>(m, "_AdamW");

  nb::class_<LRScheduler>(m, "_LRScheduler")
      .def("step", &LRScheduler::step)
      .def("get_last_lr", [](const LRScheduler& s) { return std::vector<double>{s.get_last_lr()}; })
      .def_prop_ro("last_epoch", &LRScheduler::last_epoch)
      .def("state_dict", [](const LRScheduler& s) { return from_state_dict(s.state_dict()); })
      .def("load_state_dict", [](LRScheduler& s, nb::dict d) { s.load_state_dict(to_state_dict(d)); },
           "state_dict"_a);
  nb::class_<StepLR, LRScheduler>(m, "_StepLR")
      .def(nb::init<Optimizer&, std::int64_t, double>(), "optimizer"_a, "step_size"_a, "gamma"_a,
           nb::keep_alive<1, 2>());
  nb::class_<CosineAnnealingLR, LRScheduler>(m, "_CosineAnnealingLR")
      .def(nb::init<Optimizer&, std::int64_t, double>(), "optimizer"_a, "T_max"_a, "eta_min"_a,
           nb::keep_alive<1, 2>());
}

}  // namespace lockstep::python
