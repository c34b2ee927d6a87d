// Factories (torch.zeros, torch.randn, ...), the default generator and grad mode. lockstep's
// Python __init__ turns torch's varargs sizes (zeros(2, 3), zeros((2, 3))) into the list these take.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;

TensorOptions opts(std::optional<DType> dtype, std::optional<Device> device, bool requires_grad,
                   DType fallback = DType::Float32) {
  return TensorOptions(dtype.value_or(fallback)).device(device.value_or(cpu())).requires_grad(requires_grad);
}

// Factories return leaves: requires_grad is set after the fill (a leaf requiring grad cannot be
// written in place).
Tensor leaf(Tensor t, bool requires_grad) {
  if (requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

void bind_factories(nb::module_& m) {
  using Dims = std::vector<std::int64_t>;
  m.def("_empty", [](const Dims& s, std::optional<DType> dt, std::optional<Device> dev, bool rg) {
    return leaf(empty(Shape(s), opts(dt, dev, false)), rg);
  }, "size"_a, "dtype"_a.none(), "device"_a.none(), "requires_grad"_a);
  m.def("_zeros", [](const Dims& s, std::optional<DType> dt, std::optional<Device> dev, bool rg) {
    return leaf(zeros(Shape(s), opts(dt, dev, false)), rg);
  }, "size"_a, "dtype"_a.none(), "device"_a.none(), "requires_grad"_a);
  m.def("_ones", [](const Dims& s, std::optional<DType> dt, std::optional<Device> dev, bool rg) {
    return leaf(ones(Shape(s), opts(dt, dev, false)), rg);
  }, "size"_a, "dtype"_a.none(), "device"_a.none(), "requires_grad"_a);
  m.def("_full", [](const Dims& s, double v, std::optional<DType> dt, std::optional<Device> dev, bool rg) {
    return leaf(full(Shape(s), v, opts(dt, dev, false)), rg);
  }, "size"_a, "fill_value"_a, "dtype"_a.none(), "device"_a.none(), "requires_grad"_a);
  m.def("_randn", [](const Dims& s, Generator* g, std::optional<DType> dt, std::optional<Device> dev, bool rg) {
    return leaf(randn(Shape(s), opts(dt, dev, false), g), rg);
  }, "size"_a, "generator"_a.none(), "dtype"_a.none(), "device"_a.none(), "requires_grad"_a);
  m.def("_rand", [](const Dims& s, Generator* g, std::optional<DType> dt, std::optional<Device> dev, bool rg) {
    return leaf(rand(Shape(s), opts(dt, dev, false), g), rg);
  }, "size"_a, "generator"_a.none(), "dtype"_a.none(), "device"_a.none(), "requires_grad"_a);
  m.def("_randint", [](std::int64_t low, std::int64_t high, const Dims& s, Generator* g,
                       std::optional<DType> dt, std::optional<Device> dev) {
    return randint(low, high, Shape(s), opts(dt, dev, false, DType::Int64), g);
  }, "low"_a, "high"_a, "size"_a, "generator"_a.none(), "dtype"_a.none(), "device"_a.none());
  m.def("randperm", [](std::int64_t n, Generator* g, std::optional<DType> dt, std::optional<Device> dev) {
    Tensor p = randperm(n, g);
    if (dt) p = p.to(*dt);
    return dev ? p.to(*dev) : p;
  }, "n"_a, "generator"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none(),
        "A random permutation of 0..n-1 (int64), Fisher-Yates over `generator` or the default one.");
  m.def("_arange", [](double start, double end, double step, std::optional<DType> dt,
                      std::optional<Device> dev, bool rg) {
    Tensor a = arange(start, end, step, dt ? TensorOptions(*dt) : TensorOptions(DType::Int64));
    return leaf(dev ? a.to(*dev) : a, rg);
  }, "start"_a, "end"_a, "step"_a, "dtype"_a.none(), "device"_a.none(), "requires_grad"_a);
  m.def("zeros_like", [](const Tensor& t) { return zeros_like(t); }, "input"_a);
  m.def("ones_like", [](const Tensor& t) { return ones_like(t); }, "input"_a);

  nb::class_<Generator>(m, "Generator",
                        "A seeded random stream (torch.Generator); `manual_seed` restarts it.")
      .def(nb::init<std::uint64_t>(), "seed"_a = 0)
      .def("manual_seed", [](Generator& g, std::uint64_t s) -> Generator& {
        g.manual_seed(s);
        return g;
      }, "seed"_a, nb::rv_policy::reference)
      .def("initial_seed", &Generator::seed)
      .def("get_state", [](const Generator& g) {
        return nb::make_tuple(g.seed(), g.offset());
      })
      .def("set_state", [](Generator& g, nb::tuple s) {
        g.manual_seed(nb::cast<std::uint64_t>(s[0]));
        g.set_offset(nb::cast<std::uint64_t>(s[1]));
      }, "state"_a);
  m.def("default_generator", []() -> Generator& { return default_generator(); },
        nb::rv_policy::reference);
  m.def("manual_seed", [](std::uint64_t s) { manual_seed(s); }, "seed"_a,
        "Seeds the default generator (torch.manual_seed).");

  m.def("is_grad_enabled", &GradMode::is_enabled);
  m.def("_set_grad_enabled", &GradMode::set_enabled, "mode"_a);
}

}  // namespace lockstep::python
