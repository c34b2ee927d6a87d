// lockstep.Tensor, lockstep.dtype and lockstep.device: the class a PyTorch user handles, bound
// over lockstep::Tensor (a handle: Python objects for one tensor share its data and autograd
// state). Properties and methods keep torch.Tensor's names; the arithmetic itself is the C++
// ops' (python/src/ops.cpp binds the functional spellings).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>

#include "bind.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"

namespace lockstep::python {

using namespace nb::literals;

nb::object item_of(const Tensor& t) {
  if (t.numel() != 1)
    throw ValueError("a Tensor with " + std::to_string(t.numel()) +
                     " elements cannot be converted to a Python scalar (item() needs exactly one)");
  if (t.dtype() == DType::Int64) return nb::int_(t.to_vector<std::int64_t>()[0]);
  return nb::float_(t.item());
}

nb::object to_list(const Tensor& t) {
  if (t.dim() == 0) return item_of(t);
  Tensor flat = t.reshape(Shape{t.numel()});
  const Shape s = t.shape();
  // Builds nested lists dimension by dimension from the flat values.
  std::vector<nb::object> level;
  if (t.dtype() == DType::Int64) {
    for (std::int64_t v : flat.to_vector<std::int64_t>()) level.push_back(nb::int_(v));
  } else {
    for (double v : flat.to_vector<double>()) level.push_back(nb::float_(v));
  }
  for (int d = s.size() - 1; d >= 0; --d) {
    const std::int64_t n = s[d];
    std::vector<nb::object> up;
    const std::size_t groups = n == 0 ? (d == 0 ? 1 : 0) : level.size() / static_cast<std::size_t>(n);
    for (std::size_t g = 0; g < groups; ++g) {
      nb::list l;
      for (std::int64_t i = 0; i < n; ++i) l.append(level[g * n + i]);
      up.push_back(l);
    }
    level = std::move(up);
  }
  return level.empty() ? nb::list() : level[0];
}

namespace {

std::string device_type_name(const Device& d) { return d.is_cuda() ? "cuda" : "cpu"; }

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::enum_<DType>(m, "dtype", "Element types: float32 (torch.float), float64, int64 (torch.long).")
      .value("float32", DType::Float32)
      .value("float64", DType::Float64)
      .value("int64", DType::Int64)
      .def("__repr__", [](DType t) { return "lockstep." + to_string(t); })
      .def("__str__", [](DType t) { return "lockstep." + to_string(t); })
      .def_prop_ro("is_floating_point", [](DType t) { return is_floating(t); })
      .def_prop_ro("itemsize", [](DType t) { return element_size(t); });

  nb::class_<Device>(m, "device",
                     "A device tag, as torch.device: 'cpu', 'cpu:3' (a CPU worker of "
                     "DataParallel), 'cuda:1'. DeviceError for an unparsable string.")
      .def("__init__", [](Device* d, const std::string& s) { new (d) Device(Device::parse(s)); })
      .def("__init__",
           [](Device* d, const std::string& type, int index) {
             new (d) Device(Device::parse(type + ":" + std::to_string(index)));
           })
      .def("__init__", [](Device* d, const Device& o) { new (d) Device(o); })
      .def_prop_ro("type", device_type_name)
      .def_prop_ro("index", [](const Device& d) { return d.index; })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) {
        return "device(type='" + device_type_name(d) + "', index=" + std::to_string(d.index) + ")";
      })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__eq__", [](const Device& a, const std::string& b) { return a == Device::parse(b); })
      .def("__hash__", [](const Device& d) { return static_cast<int>(d.type) * 1000003 + d.index; });
  nb::implicitly_convertible<std::string, Device>();

  nb::class_<Tensor> t(m, "Tensor",
                       "An n-dimensional array of float32, float64 or int64 on one device, with "
                       "autograd state (torch.Tensor). Always contiguous, row-major; copies of a "
                       "handle share data.");
  t.def("__init__", [](Tensor* self, const Tensor& data) { new (self) Tensor(data.detach()); },
        "A new tensor sharing `data`'s memory, without its autograd history (as Parameter(data)).")
      .def_prop_ro("shape", [](const Tensor& x) { return nb::tuple(nb::cast(x.sizes())); })
      .def("size", [](const Tensor& x) { return nb::tuple(nb::cast(x.sizes())); })
      .def("size", [](const Tensor& x, int dim) { return x.size(dim); }, "dim"_a)
      .def("dim", &Tensor::dim)
      .def_prop_ro("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def("element_size", [](const Tensor& x) { return element_size(x.dtype()); })
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("device", &Tensor::device)
      .def_prop_ro("is_cuda", [](const Tensor& x) { return x.device().is_cuda(); })
      .def("is_floating_point", [](const Tensor& x) { return is_floating(x.dtype()); })
      .def("is_contiguous", [](const Tensor&) { return true; })
      .def("contiguous", [](const Tensor& x) { return x; })
      .def("data_ptr", [](const Tensor& x) {
        return reinterpret_cast<std::uintptr_t>(x.device_raw_data());
      })
      .def("item", &item_of, "The value of a one-element tensor as a Python int or float.")
      .def("tolist", &to_list)
      .def("__len__", [](const Tensor& x) {
        if (x.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
        return x.size(0);
      })
      .def("__bool__", [](const Tensor& x) {
        if (x.numel() != 1)
          throw ValueError("Boolean value of Tensor with " + std::to_string(x.numel()) +
                           " values is ambiguous");
        return x.item() != 0.0;
      })
      .def("__float__", [](const Tensor& x) { return nb::float_(item_of(x)); })
      .def("__int__", [](const Tensor& x) { return nb::int_(item_of(x)); })
      .def("__index__", [](const Tensor& x) {
        if (x.dtype() != DType::Int64 || x.numel() != 1)
          throw nb::type_error("only integer tensors of a single element can be converted to an index");
        return x.to_vector<std::int64_t>()[0];
      })
      .def("__repr__", &Tensor::str)
      .def("__hash__", [](const Tensor& x) { return reinterpret_cast<std::intptr_t>(x.impl_ptr().get()); })
      // ---- autograd ----
      .def_prop_rw(
          "requires_grad", &Tensor::requires_grad,
          [](Tensor& x, bool r) { x.requires_grad_(r); })
      .def("requires_grad_", [](Tensor& x, bool r) { x.requires_grad_(r); return x; },
           "requires_grad"_a = true)
      .def_prop_rw(
          "grad",
          [](const Tensor& x) -> std::optional<Tensor> {
            Tensor g = x.grad();
            if (!g.defined()) return std::nullopt;
            return g;
          },
          [](Tensor& x, std::optional<Tensor> g) { x.set_grad(g ? *g : Tensor()); },
          nb::arg("grad").none())
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def_prop_ro("grad_fn", [](const Tensor& x) -> nb::object {
        if (!x.grad_fn()) return nb::none();
        return nb::str("<grad_fn>");
      })
      .def(
          "backward",
          [](const Tensor& x, std::optional<Tensor> gradient, std::optional<bool> retain_graph,
             bool create_graph) {
            if (create_graph)
              throw ValueError("backward(create_graph=True): higher-order gradients are not built");
            nb::gil_scoped_release release;
            x.backward(gradient ? *gradient : Tensor(), retain_graph.value_or(false));
          },
          "gradient"_a = nb::none(), "retain_graph"_a = nb::none(), "create_graph"_a = false,
          "Backpropagates from this tensor (one element unless `gradient` is given); gradients "
          "accumulate into the leaves' .grad. AutogradError for a non-scalar without gradient.")
      .def("detach", &Tensor::detach)
      .def("detach_", [](Tensor& x) {
        x.impl().grad_fn = nullptr;
        x.impl().requires_grad = false;
        return x;
      })
      .def("clone", &Tensor::clone)
      .def("__deepcopy__", [](const Tensor& x, nb::handle) {
        Tensor c = x.detach().clone();
        if (x.requires_grad()) c.requires_grad_(true);
        return c;
      }, "memo"_a)
      // ---- copies, conversions ----
      // Tensor.to's one-argument forms; lockstep/__init__.py's Tensor.to takes torch's spellings.
      .def("_to", [](const Tensor& x, const Device& d) { return x.to(d); }, "device"_a)
      .def("_to", [](const Tensor& x, DType dt) { return x.to(dt); }, "dtype"_a)
      .def("_to", [](const Tensor& x, const Tensor& other) {
        return x.to(other.device()).to(other.dtype());
      }, "other"_a)
      .def("cpu", [](const Tensor& x) { return x.device().is_cpu() ? x : x.to(cpu()); })
      .def("cuda", [](const Tensor& x, int index) { return x.to(Device(DeviceType::CUDA, index)); },
           "device"_a = 0)
      .def("float", [](const Tensor& x) { return x.to(DType::Float32); })
      .def("double", [](const Tensor& x) { return x.to(DType::Float64); })
      .def("long", [](const Tensor& x) { return x.to(DType::Int64); })
      .def("type_as", [](const Tensor& x, const Tensor& o) { return x.to(o.dtype()); })
      .def("copy_", [](Tensor& x, const Tensor& src) { return x.copy_(src); }, "src"_a)
      .def("fill_", [](Tensor& x, double v) { return x.fill_(v); }, "value"_a)
      .def("zero_", [](Tensor& x) { return x.zero_(); })
      .def_prop_rw(
          "data", [](const Tensor& x) { return x.detach(); },
          [](Tensor& x, const Tensor& other) { x.set_data(other); });
  bind_interop(m, t);
  bind_ops(m, t);
  bind_selection(m, t);
  bind_indexing(t);
  bind_factories(m, t);
}

}  // namespace lockstep::python
