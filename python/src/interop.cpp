// Zero copy at the border: Tensor.numpy() is a view of the tensor's memory, from_numpy() and
// from_dlpack() share the producer's memory (the producer is kept alive by the storage), and
// Tensor.__dlpack__ hands the pointer to torch.from_dlpack / np.from_dlpack (DLPack's Python
// specification: dmlc.github.io/dlpack/latest/python_spec.html).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "bind.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;

std::optional<DType> dtype_from(nb::dlpack::dtype t) {
  if (t == nb::dtype<float>()) return DType::Float32;
  if (t == nb::dtype<double>()) return DType::Float64;
  if (t == nb::dtype<std::int64_t>()) return DType::Int64;
  return std::nullopt;
}

nb::dlpack::dtype dlpack_dtype(DType t) {
  switch (t) {
    case DType::Float32: return nb::dtype<float>();
    case DType::Float64: return nb::dtype<double>();
    default: return nb::dtype<std::int64_t>();
  }
}

std::string dlpack_dtype_name(nb::dlpack::dtype t) {
  const char* kind = t.code == (std::uint8_t)nb::dlpack::dtype_code::Float ? "float"
                     : t.code == (std::uint8_t)nb::dlpack::dtype_code::Int  ? "int"
                     : t.code == (std::uint8_t)nb::dlpack::dtype_code::UInt ? "uint"
                     : t.code == (std::uint8_t)nb::dlpack::dtype_code::Bool ? "bool"
                                                                             : "other";
  return std::string(kind) + std::to_string(t.bits);
}

using CpuArray = nb::ndarray<nb::device::cpu>;

// A shared_ptr that keeps the imported array (and so its producer's memory) alive: released
// under the GIL, whichever thread drops the storage last (a DataParallel worker, autograd).
std::shared_ptr<const void> keep_alive(const CpuArray& a) {
  return std::shared_ptr<const void>(new CpuArray(a), [](const void* p) {
    auto* arr = static_cast<CpuArray*>(const_cast<void*>(p));
    if (!Py_IsInitialized()) return;  // the interpreter is gone: leak rather than crash
    nb::gil_scoped_acquire gil;
    delete arr;
  });
}

// Wraps a C-contiguous CPU array's memory, keeping it alive.
Tensor wrap(const CpuArray& a, const char* what) {
  std::optional<DType> dt = dtype_from(a.dtype());
  if (!dt)
    throw nb::type_error((std::string(what) + ": can't convert an array of dtype " +
                          dlpack_dtype_name(a.dtype()) +
                          "; Lockstep tensors are float32, float64 or int64")
                             .c_str());
  std::vector<std::int64_t> dims(a.shape_ptr(), a.shape_ptr() + a.ndim());
  if (a.ndim() > Shape::kMaxDims)
    throw ValueError(std::string(what) + ": " + std::to_string(a.ndim()) +
                     " dimensions; Lockstep tensors have at most " +
                     std::to_string(Shape::kMaxDims));
  // C-contiguity (strides in elements; any stride of a size-1 dimension is fine).
  std::int64_t expect = 1;
  const bool empty = std::find(dims.begin(), dims.end(), 0) != dims.end();
  for (int d = static_cast<int>(a.ndim()) - 1; d >= 0 && !empty; --d) {
    if (dims[d] != 1 && a.stride(d) != expect)
      throw ValueError(std::string(what) +
                       ": the array is not C-contiguous; Lockstep tensors are always "
                       "contiguous (np.ascontiguousarray makes a contiguous copy)");
    expect *= dims[d];
  }
  const Shape shape(dims);
  const std::size_t nbytes = static_cast<std::size_t>(shape.numel()) * element_size(*dt);
  auto storage = std::make_shared<Storage>(static_cast<char*>(a.data()), nbytes, cpu(), keep_alive(a));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = *dt;
  return Tensor(std::move(impl));
}

// A view of t's memory for numpy / DLPack, keeping a handle of t alive.
template <class Framework>
nb::ndarray<Framework> view_of(const Tensor& t, const char* what) {
  if (!t.device().is_cpu())
    throw nb::type_error((std::string(what) + ": can't convert a " + t.device().str() +
                          " tensor to a host array; use .cpu() first")
                             .c_str());
  if (t.requires_grad())
    throw nb::type_error((std::string("Can't call ") + what +
                          " on a Tensor that requires grad. Use tensor.detach()." + what +
                          " instead.")
                             .c_str());
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  // The storage, not the handle: `t.data = other` gives the handle new memory, and the array must
  // keep pointing at memory that stays alive (torch keeps the storage too).
  auto* keep = new std::shared_ptr<Storage>(t.impl().storage);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Storage>*>(p); });
  return nb::ndarray<Framework>(t.raw_data(), shape.size(), shape.data(), owner, nullptr,
                                dlpack_dtype(t.dtype()), nb::device::cpu::value, 0);
}

}  // namespace

void bind_interop(nb::module_& m, nb::class_<Tensor>& c) {
  c.def("numpy", [](const Tensor& t) { return view_of<nb::numpy>(t, "numpy()"); },
        "A numpy.ndarray viewing this CPU tensor's memory (no copy; writes show on both sides). "
        "TypeError for a tensor that requires grad (detach() first) or lives on a GPU.")
      .def("__array__",
           [](const Tensor& t, nb::handle dtype, nb::handle copy) {
             nb::object a = nb::cast(view_of<nb::numpy>(t.detach(), "__array__()"));
             if (!dtype.is_none()) a = a.attr("astype")(dtype);
             return a;
           },
           "dtype"_a = nb::none(), "copy"_a = nb::none())
      .def("__dlpack__",
           [](const Tensor& t, nb::kwargs kwargs) {
             nb::object arr = nb::cast(view_of<nb::array_api>(t.detach(), "__dlpack__()"));
             return arr.attr("__dlpack__")(**kwargs);
           },
           "DLPack capsule of this CPU tensor's memory (torch.from_dlpack, np.from_dlpack).")
      .def("__dlpack_device__", [](const Tensor& t) {
        return nb::make_tuple(t.device().is_cuda() ? 2 : 1, t.device().is_cuda() ? t.device().index : 0);
      });
  m.def(
      "_from_array",
      [](CpuArray a, const char* what) { return wrap(a, what); }, "array"_a, "what"_a,
      "A tensor over a C-contiguous, writable CPU array's memory (float32/float64/int64: a NumPy "
      "array, or any object with __dlpack__), keeping the array alive. TypeError for another "
      "dtype, ValueError for a non-contiguous array.");
}

}  // namespace lockstep::python
