// Factories (torch.zeros, torch.randn, ...), the default generator and grad mode. lockstep's
// Python __init__ turns torch's varargs sizes (zeros(2, 3), zeros((2, 3))) into the list these take.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <span>

#include "bind.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"
#include "lockstep/ops/random.h"

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

// torch's default_rng_seed_val: the seed of a new torch.Generator().
constexpr std::uint64_t kTorchDefaultSeed = 67280421310721ULL;

Tensor state_tensor(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::int64_t> v(bytes.begin(), bytes.end());
  return tensor(std::span<const std::int64_t>(v));
}

std::vector<std::uint8_t> state_bytes(nb::handle state) {
  std::vector<std::uint8_t> out;
  if (nb::isinstance<nb::bytes>(state)) {
    nb::bytes b = nb::borrow<nb::bytes>(state);
    out.assign(static_cast<const std::uint8_t*>(static_cast<const void*>(b.c_str())),
               static_cast<const std::uint8_t*>(static_cast<const void*>(b.c_str())) + b.size());
    return out;
  }
  const Tensor t = nb::isinstance<Tensor>(state)
                       ? nb::cast<Tensor>(state)
                       : nb::cast<Tensor>(nb::module_::import_("lockstep").attr("tensor")(state));
  for (std::int64_t v : t.to(DType::Int64).to_vector<std::int64_t>()) {
    if (v < 0 || v > 255) throw ValueError("set_state: a generator state holds bytes (0-255), got " + std::to_string(v));
    out.push_back(static_cast<std::uint8_t>(v));
  }
  return out;
}

}  // namespace

void bind_factories(nb::module_& m, nb::class_<Tensor>& c) {
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
                        "A random stream (torch.Generator): PyTorch's CPU generator (mt19937 with "
                        "torch's transformations, include/lockstep/core/generator.h), so the same "
                        "seed gives torch's numbers. A new one has torch's default seed "
                        "67280421310721.")
      .def("__init__", [](Generator* g, nb::handle device) {
        if (!device.is_none() && nb::cast<std::string>(nb::str(device)).rfind("cpu", 0) != 0)
          throw ValueError("Generator: only CPU generators exist (got device " +
                           nb::cast<std::string>(nb::str(device)) + ")");
        new (g) Generator(kTorchDefaultSeed, Generator::Engine::MT19937);
      }, "device"_a.none() = "cpu")
      .def("manual_seed", [](Generator& g, std::int64_t s) -> Generator& {
        g.manual_seed(static_cast<std::uint64_t>(s));
        return g;
      }, "seed"_a, nb::rv_policy::reference, "Restarts the stream at `seed`; returns this generator.")
      .def("initial_seed", &Generator::seed)
      .def("get_state", [](const Generator& g) { return state_tensor(g.get_state()); },
           "The whole state as an int64 tensor of byte values (torch.Generator.get_state's 5056 "
           "bytes; Lockstep has no uint8 dtype).")
      .def("set_state", [](Generator& g, nb::handle state) { g.set_state(state_bytes(state)); },
           "new_state"_a, "Restores a state from get_state() (a tensor, bytes or a uint8 array). "
           "ValueError for a state of another size or content.");
  m.def("default_generator", []() -> Generator& { return default_generator(); },
        nb::rv_policy::reference);
  m.def("_use_pytorch_streams", [](std::uint64_t seed) {
    default_generator().set_engine(Generator::Engine::MT19937);
    default_generator().manual_seed(seed);
  }, "seed"_a, "The default generator becomes PyTorch's (mt19937), seeded with `seed`.");
  m.def("manual_seed", [](std::int64_t s) -> Generator& {
    manual_seed(static_cast<std::uint64_t>(s));
    return default_generator();
  }, "seed"_a, nb::rv_policy::reference,
        "Seeds the default generator (torch.manual_seed); returns it.");

  // In-place samplers (torch.Tensor.uniform_, normal_, random_, bernoulli_): PyTorch's draws.
  c.def("uniform_", [](Tensor& t, double from, double to, Generator* g) -> Tensor& {
     return uniform_(t, from, to, g);
   }, "from_"_a = 0.0, "to"_a = 1.0, nb::kw_only(), "generator"_a = nb::none(), nb::rv_policy::reference)
      .def("normal_", [](Tensor& t, double mean, double std, Generator* g) -> Tensor& {
        return normal_(t, mean, std, g);
      }, "mean"_a = 0.0, "std"_a = 1.0, nb::kw_only(), "generator"_a = nb::none(), nb::rv_policy::reference)
      .def("random_", [](Tensor& t, std::optional<std::int64_t> from, std::optional<std::int64_t> to,
                         Generator* g) -> Tensor& {
        if (!from && !to) return random_(t, g);
        if (from && !to) return random_(t, 0, *from, g);  // random_(to)
        return random_(t, from.value_or(0), *to, g);
      }, "from_"_a = nb::none(), "to"_a = nb::none(), nb::kw_only(), "generator"_a = nb::none(),
         nb::rv_policy::reference)
      .def("bernoulli_", [](Tensor& t, double p, Generator* g) -> Tensor& { return bernoulli_(t, p, g); },
           "p"_a = 0.5, nb::kw_only(), "generator"_a = nb::none(), nb::rv_policy::reference);

  m.def("is_grad_enabled", &GradMode::is_enabled);
  m.def("_set_grad_enabled", &GradMode::set_enabled, "mode"_a);
}

}  // namespace lockstep::python
