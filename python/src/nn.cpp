// lockstep.nn's C++ half: Module (subclassable from Python: a user's forward is called through a
// trampoline when C++ runs it, e.g. inside Sequential or DataParallel) and Parameter; the built-in
// layers are in layers.cpp. What
// torch.nn.Module does in Python — attribute assignment registering parameters, buffers and
// submodules (torch/nn/modules/module.py, Module.__setattr__) — is done here over the C++
// registry, so a parameter lives in one place whether C++ or Python made it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nanobind/trampoline.h>

#include "bind.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/nn/module.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;
using nn::Module;
using ModulePtr = std::shared_ptr<Module>;

/// torch.nn.Parameter: a Tensor that Module.__setattr__ registers as a parameter.
struct Parameter : Tensor {
  using Tensor::Tensor;
  explicit Parameter(const Tensor& t) : Tensor(t) {}
};

// A Python exception raised inside a forward that C++ called (a DataParallel replica on its
// worker thread) as the Lockstep error of the same kind, so it crosses threads without a Python
// object and reaches the caller as the Python type it started as.
[[noreturn]] void rethrow_python(nb::python_error& e) {
  nb::gil_scoped_acquire gil;
  const std::string msg = e.what();
  if (e.matches(PyExc_IndexError)) throw IndexError(msg);
  if (e.matches(PyExc_ValueError)) throw ValueError(msg);
  if (e.matches(PyExc_KeyboardInterrupt)) throw Error("KeyboardInterrupt in a replica's forward");
  throw Error(msg);
}

// The trampoline: C++ calls a Python subclass's forward (Sequential, DataParallel's replicas),
// names it by its Python class, and clones it for DataParallel.
class PyModule : public Module {
 public:
  NB_TRAMPOLINE(Module, 3);
  Tensor forward(const Tensor& x) override {
    try {
      NB_OVERRIDE_NAME("forward", forward, x);
    } catch (nb::python_error& e) {
      rethrow_python(e);
    } catch (const nb::cast_error&) {
      throw ValueError(name() + ".forward returned something other than one Tensor; when C++ "
                       "runs a forward (DataParallel's replicas, Sequential) it must return "
                       "exactly one Tensor (tuples and dicts are not gathered yet)");
    }
  }
  // A Python module's copy (lockstep.nn.module._clone_python_module): the same class, its
  // plain attributes deep-copied, its parameters and buffers copied, its children cloned.
  std::shared_ptr<Module> clone() const override {
    nb::gil_scoped_acquire gil;
    nb::handle self = nb::find(static_cast<const Module*>(this));
    if (!self.is_valid()) return Module::clone();
    nb::object copy = nb::module_::import_("lockstep.nn.module").attr("_clone_python_module")(self);
    return nb::cast<std::shared_ptr<Module>>(copy);
  }
  std::string name() const override {
    nb::gil_scoped_acquire gil;
    nb::handle self = nb::find(static_cast<const Module*>(this));
    if (!self.is_valid()) return "Module";
    return nb::cast<std::string>(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(self.ptr()))).attr("__name__"));
  }
};

nb::object param_object(const Tensor& t) {
  if (!t.defined()) return nb::none();
  return nb::cast(Parameter(t));
}

nb::object get_attr(Module& m, const std::string& name) {
  for (const auto& [k, v] : m.named_parameters(false))
    if (k == name) return param_object(v);
  for (const auto& [k, v] : m.named_buffers(false))
    if (k == name) return nb::cast(v);
  for (const auto& [k, v] : m.named_children())
    if (k == name) return nb::cast(v);
  throw nb::attribute_error(("'" + m.name() + "' object has no attribute '" + name + "'").c_str());
}

bool has_name(const std::vector<std::pair<std::string, Tensor>>& items, const std::string& name) {
  for (const auto& [k, v] : items)
    if (k == name) return true;
  return false;
}

// torch.nn.Module.__setattr__'s rules over the C++ registry.
void set_attr(nb::handle self, const std::string& name, nb::handle value) {
  Module& m = nb::cast<Module&>(self);
  if (nb::isinstance<Parameter>(value)) {
    Tensor t = nb::cast<Tensor>(value);
    m.register_parameter(name, t, t.requires_grad());
    return;
  }
  if (nb::isinstance<Module>(value)) {
    m.register_child(name, nb::cast<ModulePtr>(value));
    return;
  }
  if (has_name(m.named_parameters(false), name)) {
    if (value.is_none()) {
      m.register_parameter(name, Tensor(), false);
      return;
    }
    throw nb::type_error(("cannot assign '" + nb::cast<std::string>(nb::str(value.type().attr("__name__"))) +
                          "' as parameter '" + name + "' (lockstep.nn.Parameter or None expected)")
                             .c_str());
  }
  if (has_name(m.named_buffers(false), name)) {
    if (value.is_none()) {
      m.register_buffer(name, Tensor());
      return;
    }
    if (!nb::isinstance<Tensor>(value))
      throw nb::type_error(("cannot assign '" + nb::cast<std::string>(nb::str(value.type().attr("__name__"))) +
                            "' as buffer '" + name + "' (lockstep.Tensor or None expected)")
                               .c_str());
    m.register_buffer(name, nb::cast<Tensor>(value));
    return;
  }
  for (const auto& [k, c] : m.named_children())
    if (k == name && value.is_none())
      throw nb::type_error(("cannot remove submodule '" + name + "' by assigning None").c_str());
  if (PyObject_GenericSetAttr(self.ptr(), nb::str(name.c_str()).ptr(), value.ptr()) != 0)
    throw nb::python_error();
}

nb::list pairs(const std::vector<std::pair<std::string, Tensor>>& items, bool params,
               const std::string& prefix) {
  nb::list out;
  for (const auto& [k, v] : items)
    out.append(nb::make_tuple(prefix.empty() ? k : prefix + "." + k, params ? param_object(v) : nb::cast(v)));
  return out;
}

void named_modules(const ModulePtr& m, const std::string& prefix, nb::list& out,
                   std::vector<const Module*>& seen) {
  for (const Module* s : seen)
    if (s == m.get()) return;
  seen.push_back(m.get());
  out.append(nb::make_tuple(prefix, m));
  for (const auto& [k, c] : m->named_children())
    named_modules(c, prefix.empty() ? k : prefix + "." + k, out, seen);
}

StateDict state_dict_from(nb::dict d) {
  StateDict sd;
  for (auto [k, v] : d) {
    if (!nb::isinstance<Tensor>(v))
      throw nb::type_error(("state_dict value for '" + nb::cast<std::string>(nb::str(k)) +
                            "' is not a lockstep.Tensor").c_str());
    sd.insert(nb::cast<std::string>(nb::str(k)), nb::cast<Tensor>(v));
  }
  return sd;
}

}  // namespace

StateDict to_state_dict(nb::dict d) { return state_dict_from(d); }

nb::dict from_state_dict(const StateDict& sd) {
  nb::dict out;
  for (const auto& [k, v] : sd) out[k.c_str()] = v;
  return out;
}

void bind_nn(nb::module_& m) {
  nb::class_<Parameter, Tensor>(m, "Parameter",
                                "A Tensor that a Module registers as a parameter when assigned "
                                "as an attribute (torch.nn.Parameter). Shares `data`'s memory.")
      .def("__init__", [](Parameter* p, std::optional<Tensor> data, bool requires_grad) {
        Tensor t = data ? data->detach() : empty(Shape{0});
        new (p) Parameter(t);
        p->requires_grad_(requires_grad);
      }, "data"_a = nb::none(), "requires_grad"_a = true)
      .def("__repr__", [](const Parameter& p) { return "Parameter containing:\n" + p.str(); });

  nb::class_<Module, PyModule>(m, "Module", nb::dynamic_attr(),
                               "Base of every layer and model (torch.nn.Module). Subclass it, "
                               "call super().__init__(), assign Parameters, buffers and Modules "
                               "as attributes, and define forward().")
      .def(nb::init<>())
      .def("__getattr__", [](Module& self, const std::string& name) { return get_attr(self, name); })
      .def("__setattr__", &set_attr, "name"_a, "value"_a.none())
      // Without the GIL where a layer may wait for the other replicas inside (SyncBatchNorm's
      // collectives: they need the GIL to run their own Python forwards) or is long.
      .def("forward", [](Module& self, const Tensor& x) {
        MaybeReleaseGil release(self.runs_collectives() || worth_releasing_gil(x));
        return self.forward(x);
      }, "input"_a)
      .def("_type_name", &Module::name)
      .def("_clone", [](const Module& self) { return self.clone(); },
           "A deep copy with its own parameters (what DataParallel replicates).")
      .def("__deepcopy__", [](const Module& self, nb::handle) { return self.clone(); }, "memo"_a)
      .def("parameters", [](const Module& self, bool recurse) {
        nb::list out;
        for (const Tensor& t : self.parameters(recurse)) out.append(param_object(t));
        return out;
      }, "recurse"_a = true, "The parameters, children's after their parent's, each once.")
      .def("named_parameters", [](const Module& self, const std::string& prefix, bool recurse) {
        return pairs(self.named_parameters(recurse), true, prefix);
      }, "prefix"_a = "", "recurse"_a = true)
      .def("buffers", [](const Module& self, bool recurse) { return self.buffers(recurse); },
           "recurse"_a = true)
      .def("named_buffers", [](const Module& self, const std::string& prefix, bool recurse) {
        return pairs(self.named_buffers(recurse), false, prefix);
      }, "prefix"_a = "", "recurse"_a = true)
      .def("children", [](const Module& self) { return self.children(); })
      .def("named_children", [](const Module& self) { return self.named_children(); })
      .def("named_modules", [](ModulePtr self, const std::string& prefix) {
        nb::list out;
        std::vector<const Module*> seen;
        named_modules(self, prefix, out, seen);
        return out;
      }, "prefix"_a = "")
      .def("register_parameter", [](Module& self, const std::string& name, nb::handle p) {
        if (!p.is_none() && !nb::isinstance<Parameter>(p))
          throw nb::type_error(("cannot assign '" + nb::cast<std::string>(nb::str(p.type().attr("__name__"))) +
                                "' object to parameter '" + name + "' (lockstep.nn.Parameter or None required)").c_str());
        Tensor t = p.is_none() ? Tensor() : nb::cast<Tensor>(p);
        self.register_parameter(name, t, t.defined() && t.requires_grad());
      }, "name"_a, "param"_a.none())
      .def("register_buffer", [](Module& self, const std::string& name, std::optional<Tensor> t,
                                 bool persistent) {
        if (!persistent)
          throw ValueError("register_buffer('" + name + "', persistent=False) is not supported");
        self.register_buffer(name, t ? *t : Tensor());
      }, "name"_a, "tensor"_a.none(), "persistent"_a = true)
      .def("add_module", [](Module& self, const std::string& name, ModulePtr c) {
        self.register_child(name, std::move(c));
      }, "name"_a, "module"_a)
      .def("register_module", [](Module& self, const std::string& name, ModulePtr c) {
        self.register_child(name, std::move(c));
      }, "name"_a, "module"_a)
      .def("state_dict", [](const Module& self) { return from_state_dict(self.state_dict()); },
           "Parameters and buffers under dotted names (values shared with the module).")
      .def("_load_state_dict", [](Module& self, nb::dict d, bool strict) {
        self.load_state_dict(state_dict_from(d), strict);
      }, "state_dict"_a, "strict"_a = true)
      .def("train", [](nb::handle self, bool mode) {
        nb::cast<Module&>(self).train(mode);
        return nb::borrow(self);
      }, "mode"_a = true)
      .def("eval", [](nb::handle self) {
        nb::cast<Module&>(self).eval();
        return nb::borrow(self);
      })
      .def_prop_ro("training", &Module::is_training)
      .def("_to_device", [](Module& self, const Device& d) { self.to(d); }, "device"_a)
      .def("_to_dtype", [](Module& self, DType t) { self.to(t); }, "dtype"_a)
      .def("zero_grad", [](Module& self, bool set_to_none) {
        if (set_to_none) {
          self.zero_grad();
        } else {
          for (Tensor& p : self.parameters())
            if (p.grad().defined()) p.grad().zero_();
        }
      }, "set_to_none"_a = true);

  bind_layers(m);
}

}  // namespace lockstep::python
