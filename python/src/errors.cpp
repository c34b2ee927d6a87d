// Lockstep's typed C++ errors as the Python exceptions a PyTorch user expects: IndexError and
// ValueError as Python's own (subclassed, so `except IndexError` works), the rest as RuntimeError
// subclasses (torch raises RuntimeError for shape, dtype, device and autograd misuse), file
// errors as OSError, every message the C++ one.
#include <nanobind/nanobind.h>

#include <typeinfo>

#include "bind.h"
#include "lockstep/core/error.h"

namespace lockstep::python {

namespace {

PyObject* make_type(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qual = std::string("lockstep.") + name;
  PyObject* t = PyErr_NewExceptionWithDoc(qual.c_str(), doc, base, nullptr);
  if (!t) throw nb::python_error();
  m.attr(name) = nb::handle(t);
  return t;
}

}  // namespace

void bind_errors(nb::module_& m) {
  static PyObject* error = make_type(m, "Error", PyExc_RuntimeError,
                                     "Base of Lockstep's errors that torch reports as RuntimeError.");
  static PyObject* shape = make_type(m, "ShapeError", error, "Tensor shapes that do not fit the op.");
  static PyObject* dtype = make_type(m, "DTypeError", error, "A dtype the op does not accept.");
  static PyObject* device = make_type(m, "DeviceError", error, "An unavailable or mismatched device.");
  static PyObject* cuda = make_type(m, "CudaError", device, "A failed CUDA call.");
  static PyObject* autograd = make_type(m, "AutogradError", error, "Misuse of autograd.");
  static PyObject* state = make_type(m, "StateDictError", error,
                                     "Missing/unexpected keys or mismatched shapes in a state_dict.");
  static PyObject* data = make_type(m, "DataError", error, "A malformed data or model file.");
  static PyObject* dist = make_type(m, "DistError", error, "A collective or peer failure.");
  static PyObject* timeout = make_type(m, "DistTimeoutError", dist, "A collective that timed out.");
  static PyObject* index = make_type(m, "IndexError", PyExc_IndexError, "An index out of range.");
  // torch raises RuntimeError where Lockstep's C++ says ValueError (zeros(-1), randint(5, 2),
  // item() of two elements): lockstep.ValueError is both, so either except clause catches it.
  static PyObject* value = make_type(m, "ValueError",
                                     nb::make_tuple(nb::handle(PyExc_ValueError), nb::handle(error)).release().ptr(),
                                     "An argument value outside its domain (a ValueError and a RuntimeError).");
  static PyObject* io = make_type(m, "IoError", PyExc_OSError,
                                  "A file that cannot be opened, read, written or renamed.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const IndexError& e) {
      PyErr_SetString(index, e.what());
    } catch (const ValueError& e) {
      PyErr_SetString(value, e.what());
    } catch (const ShapeError& e) {
      PyErr_SetString(shape, e.what());
    } catch (const DTypeError& e) {
      PyErr_SetString(dtype, e.what());
    } catch (const CudaError& e) {
      PyErr_SetString(cuda, e.what());
    } catch (const DeviceError& e) {
      PyErr_SetString(device, e.what());
    } catch (const AutogradError& e) {
      PyErr_SetString(autograd, e.what());
    } catch (const StateDictError& e) {
      PyErr_SetString(state, e.what());
    } catch (const DataError& e) {
      PyErr_SetString(data, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(timeout, e.what());
    } catch (const DistError& e) {
      PyErr_SetString(dist, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(io, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error, e.what());
    } catch (const std::bad_cast& e) {
      PyErr_SetString(PyExc_TypeError, "an argument has the wrong type");
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    } catch (const std::length_error& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });
}

}  // namespace lockstep::python
