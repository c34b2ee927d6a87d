// lockstep.utils.data's C++ half: DistributedSampler's indices (include/lockstep/data/sampler.h),
// so a rank's share is computed by the same code in C++ and Python programs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "lockstep/data/sampler.h"

namespace lockstep::python {

void bind_data(nb::module_& m) {
  using namespace nb::literals;
  using data::DistributedSampler;
  nb::class_<DistributedSampler>(m, "_DistributedSampler")
      // torch's permutation: randperm of torch.Generator().manual_seed(seed + epoch)
      .def("__init__", [](DistributedSampler* s, std::int64_t n, std::int64_t replicas,
                          std::int64_t rank, bool shuffle, std::uint64_t seed, bool drop_last) {
        new (s) DistributedSampler(n, replicas, rank, shuffle, seed, drop_last,
                                   Generator::Engine::MT19937);
      }, "dataset_size"_a, "num_replicas"_a, "rank"_a, "shuffle"_a, "seed"_a, "drop_last"_a)
      .def_prop_ro("num_samples", &DistributedSampler::size)
      .def("indices", [](const DistributedSampler& s, std::int64_t epoch) {
        return s.indices(epoch);
      }, "epoch"_a);
  nb::class_<data::TorchRandomSampler>(m, "_RandomSampler")
      .def(nb::init<std::int64_t, Generator*>(), "n"_a, "generator"_a.none(), nb::keep_alive<1, 3>())
      .def("indices", [](const data::TorchRandomSampler& s) { return s.indices(0); },
           "One pass in torch's order (RandomSampler.__iter__).");
}

}  // namespace lockstep::python
