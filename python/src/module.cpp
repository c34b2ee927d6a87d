// lockstep._C: the native half of the Python package (python/lockstep/ is the other half).
#include "bind.h"
#include "lockstep/cuda/runtime.h"

namespace lockstep::python {

Shape to_shape(const std::vector<std::int64_t>& dims) { return Shape(dims); }

}  // namespace lockstep::python

NB_MODULE(_C, m) {
  using namespace lockstep::python;
  m.doc() = "Lockstep's C++ engine (tensors, ops, autograd, nn, optim, io) for Python";
  // A script's DataParallel at module level forms a cycle the collector cannot see (the C++
  // wrapper holds the Python module, whose class's globals hold the wrapper): Python leaves it
  // to the process's exit, and nanobind would list it as a leak there. Nothing leaks while the
  // program runs (tests/python/test_parallel.py checks that a deleted wrapper is freed).
  nb::set_leak_warnings(false);
  bind_errors(m);
  bind_tensor(m);
  bind_nn(m);
  bind_models(m);
  bind_optim(m);
  bind_io(m);
  bind_data(m);
  bind_parallel(m);
  m.def("_cuda_device_count", [] { return lockstep::cuda::device_count(); });
}
