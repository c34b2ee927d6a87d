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
      .def(nb::init<std::int64_t, std::int64_t, std::int64_t, bool, std::uint64_t, bool>(),
           "dataset_size"_a, "num_replicas"_a, "rank"_a, "shuffle"_a, "seed"_a, "drop_last"_a)
      .def_prop_ro("num_samples", &DistributedSampler::size)
      .def("indices", [](const DistributedSampler& s, std::int64_t epoch) {
        return s.indices(epoch);
      }, "epoch"_a);
}

}  // namespace lockstep::python
