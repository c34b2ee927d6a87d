// Tensor.__getitem__ / __setitem__ for torch's basic and integer-array indexing: ints, slices
// with a positive step, None, Ellipsis, int64 index tensors, and tuples of them. Reads are views
// where the C++ ops give views (along dim 0), copies elsewhere, as Lockstep tensors are always
// contiguous; writes go through dim 0 only, where a view exists. Boolean masks need a bool dtype
// Lockstep does not have yet: IndexError says so.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <span>

#include "bind.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/ops.h"

namespace lockstep::python {

namespace {

// One index item applied at dimension `dim`; advances `dim` past what the item consumed.
Tensor apply_one(const Tensor& t, int& dim, nb::handle idx) {
  if (idx.is_none()) {
    std::vector<std::int64_t> s = t.sizes();
    s.insert(s.begin() + dim, 1);
    ++dim;
    return t.reshape(Shape(s));
  }
  if (dim >= t.dim())
    throw IndexError("too many indices for a tensor of dimension " + std::to_string(t.dim()));
  const std::int64_t n = t.size(dim);
  if (nb::isinstance<nb::bool_>(idx))
    throw IndexError("indexing with a Python bool is not supported (a boolean mask needs a bool dtype)");
  if (nb::isinstance<nb::int_>(idx)) {
    std::int64_t i = nb::cast<std::int64_t>(idx);
    if (i < -n || i >= n)
      throw IndexError("index " + std::to_string(i) + " is out of bounds for dimension " +
                       std::to_string(dim) + " with size " + std::to_string(n));
    if (i < 0) i += n;
    Tensor r = narrow(t, dim, i, 1);
    std::vector<std::int64_t> s = r.sizes();
    s.erase(s.begin() + dim);
    return r.reshape(Shape(s));
  }
  if (nb::isinstance<nb::slice>(idx)) {
    Py_ssize_t start, stop, step, len;
    if (PySlice_GetIndicesEx(idx.ptr(), static_cast<Py_ssize_t>(n), &start, &stop, &step, &len) != 0)
      throw nb::python_error();
    if (step <= 0) throw ValueError("step must be greater than zero");
    Tensor r;
    if (step == 1) {
      r = narrow(t, dim, start, len);
    } else {
      Tensor positions = arange(static_cast<double>(start), static_cast<double>(start + len * step),
                                static_cast<double>(step));
      r = index_select(t, dim, positions);
    }
    ++dim;
    return r;
  }
  if (nb::isinstance<Tensor>(idx)) {
    const Tensor& i = nb::cast<const Tensor&>(idx);
    if (i.dtype() != DType::Int64)
      throw IndexError("tensors used as indices must be int64 (boolean masks need a bool dtype, "
                       "which Lockstep does not have yet); got " + to_string(i.dtype()));
    Tensor flat = i.reshape(Shape{i.numel()});
    // Negative indices count from the end, as torch's (index_select itself refuses them).
    std::vector<std::int64_t> v = flat.to_vector<std::int64_t>();
    if (std::any_of(v.begin(), v.end(), [](std::int64_t x) { return x < 0; })) {
      for (std::int64_t& x : v)
        if (x < 0 && x >= -n) x += n;
      flat = tensor(std::span<const std::int64_t>(v));
    }
    Tensor r = index_select(t, dim, flat);
    std::vector<std::int64_t> s = t.sizes();
    s.erase(s.begin() + dim);
    std::vector<std::int64_t> is = i.sizes();
    s.insert(s.begin() + dim, is.begin(), is.end());
    dim += i.dim();
    return r.reshape(Shape(s));
  }
  throw nb::type_error("only integers, slices, None, Ellipsis and int64 tensors are valid indices");
}

Tensor get_item(const Tensor& t, nb::handle index) {
  if (!nb::isinstance<nb::tuple>(index)) {
    int dim = 0;
    if (index.is(nb::ellipsis())) return t;
    return apply_one(t, dim, index);
  }
  nb::tuple items = nb::borrow<nb::tuple>(index);
  int consuming = 0;  // items that consume a dimension
  for (nb::handle h : items)
    if (!h.is_none() && !h.is(nb::ellipsis()))
      consuming += nb::isinstance<Tensor>(h) ? 1 : 1;
  Tensor r = t;
  int dim = 0;
  bool seen_ellipsis = false;
  for (nb::handle h : items) {
    if (h.is(nb::ellipsis())) {
      if (seen_ellipsis) throw IndexError("an index can only have a single ellipsis ('...')");
      seen_ellipsis = true;
      dim += t.dim() - consuming;
      if (dim < 0) throw IndexError("too many indices for a tensor of dimension " + std::to_string(t.dim()));
      continue;
    }
    r = apply_one(r, dim, h);
  }
  return r;
}

// The rows of dim 0 an index selects, when it selects along dim 0 only (the only writable views).
void set_item(Tensor& t, nb::handle index, nb::handle value) {
  // An indexed write is not recorded by autograd: refuse it where autograd would need it instead
  // of giving wrong gradients (a leaf that requires grad is refused by copy_, as torch does).
  if (GradMode::is_enabled() && ((t.requires_grad() && !t.is_leaf()) ||
                                 (nb::isinstance<Tensor>(value) && nb::cast<const Tensor&>(value).requires_grad())))
    throw AutogradError("an indexed assignment into a tensor in the autograd graph (or of a value "
                        "that requires grad) is not recorded by Lockstep's autograd; build the "
                        "tensor with cat/stack or assign under no_grad()");
  nb::handle first = index;
  if (nb::isinstance<nb::tuple>(index)) {
    nb::tuple items = nb::borrow<nb::tuple>(index);
    for (std::size_t k = 1; k < items.size(); ++k) {
      nb::handle h = items[k];
      bool full = nb::isinstance<nb::slice>(h) && h.attr("start").is_none() &&
                  h.attr("stop").is_none() && h.attr("step").is_none();
      if (!full && !h.is(nb::ellipsis()))
        throw IndexError("assignment through an index on a dimension other than 0 is not supported "
                         "(Lockstep tensors are contiguous: only dim-0 indices give views)");
    }
    first = items.size() ? items[0] : nb::handle(nb::ellipsis());
  }
  auto assign = [&](Tensor dst) {
    if (nb::isinstance<Tensor>(value)) {
      const Tensor& v = nb::cast<const Tensor&>(value);
      dst.copy_(v.shape() == dst.shape() ? v : add(zeros_like(dst), v.to(dst.dtype())));
    } else {
      dst.fill_(nb::cast<double>(value));
    }
  };
  if (first.is(nb::ellipsis())) return assign(t);
  if (nb::isinstance<Tensor>(first)) {
    const Tensor& i = nb::cast<const Tensor&>(first);
    if (i.dtype() != DType::Int64)
      throw IndexError("tensors used as indices must be int64; got " + to_string(i.dtype()));
    const std::vector<std::int64_t> rows = i.to_vector<std::int64_t>();
    Tensor src = nb::isinstance<Tensor>(value) ? nb::cast<const Tensor&>(value) : Tensor();
    for (std::size_t k = 0; k < rows.size(); ++k) {
      int dim = 0;
      Tensor dst = apply_one(t, dim, nb::int_(rows[k]));
      if (src.defined() && src.dim() > 0 && src.size(0) == static_cast<std::int64_t>(rows.size())) {
        int d0 = 0;
        dst.copy_(apply_one(src, d0, nb::int_(static_cast<std::int64_t>(k))));
      } else {
        assign(dst);
      }
    }
    return;
  }
  if (nb::isinstance<nb::slice>(first) && !first.attr("step").is_none() &&
      nb::cast<std::int64_t>(first.attr("step")) != 1)
    throw IndexError("assignment through a slice with a step is not supported");
  int dim = 0;
  assign(apply_one(t, dim, first));
}

}  // namespace

void bind_indexing(nb::class_<Tensor>& c) {
  using namespace nb::literals;
  c.def("__getitem__", &get_item, "index"_a.none())
      .def("__iter__", [](nb::handle self) {
        const Tensor& t = nb::cast<const Tensor&>(self);
        if (t.dim() == 0) throw nb::type_error("iteration over a 0-d tensor");
        nb::list rows;
        for (std::int64_t i = 0; i < t.size(0); ++i) {
          int dim = 0;
          rows.append(apply_one(t, dim, nb::int_(i)));
        }
        return nb::iter(rows);
      })
      .def("__setitem__", [](Tensor& t, nb::handle index, nb::handle value) {
        set_item(t, index, value);
      }, "index"_a.none(), "value"_a.none());
}

}  // namespace lockstep::python
