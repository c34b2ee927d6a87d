// lockstep.save / lockstep.load's C++ half: safetensors files through include/lockstep/io/ (the
// same writer and reader as the CLI's checkpoints: atomic write, every malformed byte a
// DataError naming the file).
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::python {

void bind_io(nb::module_& m) {
  using namespace nb::literals;
  m.def("_save_file", [](const safetensors::TensorList& tensors, const std::string& path,
                         const std::map<std::string, std::string>& metadata) {
    nb::gil_scoped_release r;
    safetensors::save_file(tensors, path, metadata);
  }, "tensors"_a, "path"_a, "metadata"_a);
  m.def("_load_file", [](const std::string& path) {
    safetensors::File f;
    {
      nb::gil_scoped_release r;
      f = safetensors::load_file(path);
    }
    return nb::make_tuple(f.tensors, f.metadata);
  }, "path"_a);
}

}  // namespace lockstep::python
