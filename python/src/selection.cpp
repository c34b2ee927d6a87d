// torch's comparisons (eq ne lt le gt ge and their operators), tril/triu, masked_fill, where,
// topk and multinomial: functions in lockstep._C and Tensor methods, each one call into
// include/lockstep/ops/ (src/ops/elementwise.cpp, mask.cpp, topk.cpp, random.cpp). A comparison
// gives an int64 0/1 tensor (torch's bool: Lockstep has no bool dtype), the mask masked_fill and
// where take.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include "bind.h"
#include "lockstep/ops/ops.h"
#include "lockstep/ops/random.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;
using Cmp = Tensor (*)(const Tensor&, const Tensor&);

// `other` as a tensor for a comparison with `a`: a tensor as it is, a Python number as a 0-d
// tensor of a's dtype (float32 when a is int64 and the number is a float: torch's promotion).
// TypeError for anything else, as torch's `t < "x"`.
std::pair<Tensor, Tensor> operands(const Tensor& a, nb::handle other) {
  if (nb::isinstance<Tensor>(other)) return {a, nb::cast<const Tensor&>(other)};
  if (nb::isinstance<nb::str>(other) || !PyNumber_Check(other.ptr()))
    throw nb::type_error(("comparison of a Tensor with '" +
                          nb::cast<std::string>(other.type().attr("__name__")) +
                          "' is not supported (a Tensor or a number)").c_str());
  const Tensor x = a.dtype() == DType::Int64 && nb::isinstance<nb::float_>(other) ? a.to(DType::Float32) : a;
  return {x, scalar_tensor(nb::cast<double>(other), x.options())};
}

Tensor compare(Cmp op, const Tensor& a, nb::handle other) {
  auto [x, y] = operands(a, other);
  return op(x, y);
}

// A where/masked_fill value: a number, or a 0-d tensor (torch takes both).
double value_of(nb::handle v) {
  if (nb::isinstance<Tensor>(v)) {
    const Tensor& t = nb::cast<const Tensor&>(v);
    if (t.dim() != 0)
      throw ValueError("masked_fill only supports a 0-dimensional value tensor, but got tensor with " +
                       std::to_string(t.dim()) + " dimension(s)");
    return t.item();
  }
  if (nb::isinstance<nb::str>(v) || !PyNumber_Check(v.ptr()))
    throw nb::type_error("masked_fill(): value must be a number or a 0-d Tensor");
  return nb::cast<double>(v);
}

// torch.where's input/other: a tensor, or a number as a 0-d tensor of the other side's dtype
// (float32 when both are numbers).
// An int64 tensor beside a Python float becomes float32, as torch's promotion
// (torch.where(c, arange(3), 2.5) is float32 [0., 2.5, 2.]).
Tensor where_of(const Tensor& c, nb::handle x, nb::handle y) {
  const bool tx = nb::isinstance<Tensor>(x), ty = nb::isinstance<Tensor>(y);
  TensorOptions o = tx ? nb::cast<const Tensor&>(x).options()
                    : ty ? nb::cast<const Tensor&>(y).options()
                         : TensorOptions(DType::Float32);
  const bool promote =
      o.dtype_ == DType::Int64 && (nb::isinstance<nb::float_>(x) || nb::isinstance<nb::float_>(y));
  if (promote) o = o.dtype(DType::Float32);
  auto as_tensor = [&](nb::handle h) {
    if (nb::isinstance<Tensor>(h)) {
      const Tensor& t = nb::cast<const Tensor&>(h);
      return promote && t.dtype() == DType::Int64 ? t.to(DType::Float32) : t;
    }
    if (nb::isinstance<nb::str>(h) || !PyNumber_Check(h.ptr()))
      throw nb::type_error("where(): input and other must be Tensors or numbers");
    return scalar_tensor(nb::cast<double>(h), o);
  };
  return where(c, as_tensor(x), as_tensor(y));
}

nb::object topk_result(const Tensor& a, std::int64_t k, int dim, bool largest, bool sorted) {
  auto [values, indices] = topk(a, k, dim, largest, sorted);
  static nb::object cls = nb::module_::import_("collections").attr("namedtuple")(
      "topk", nb::make_tuple("values", "indices"));
  return cls(values, indices);
}

}  // namespace

void bind_selection(nb::module_& m, nb::class_<Tensor>& c) {
  const std::pair<const char*, Cmp> cmps[] = {{"eq", eq}, {"ne", ne}, {"lt", lt},
                                              {"le", le}, {"gt", gt}, {"ge", ge}};
  for (const auto& [name, op] : cmps) {
    m.def(name, [op](const Tensor& a, nb::handle b) { return compare(op, a, b); }, "input"_a, "other"_a,
          "Elementwise comparison as int64 0/1 (torch gives bool; Lockstep has no bool dtype).");
    c.def(name, [op](const Tensor& a, nb::handle b) { return compare(op, a, b); }, "other"_a);
  }
  // == and != compare numbers as < does (an int64 tensor == 2.5 is all 0, not a comparison with
  // 2); anything else (None, a string) is just not equal, as in torch: NotImplemented lets Python
  // fall back to identity, where <, <=, >, >= raise TypeError.
  auto equality = [](Cmp op) {
    return [op](const Tensor& a, nb::handle b) -> nb::object {
      if (!nb::isinstance<Tensor>(b) && (nb::isinstance<nb::str>(b) || !PyNumber_Check(b.ptr())))
        return nb::borrow(Py_NotImplemented);
      return nb::cast(compare(op, a, b));
    };
  };
  c.def("__eq__", equality(eq), nb::arg().none()).def("__ne__", equality(ne), nb::arg().none());
  c.def("__lt__", [](const Tensor& a, nb::handle b) { return compare(lt, a, b); })
      .def("__le__", [](const Tensor& a, nb::handle b) { return compare(le, a, b); })
      .def("__gt__", [](const Tensor& a, nb::handle b) { return compare(gt, a, b); })
      .def("__ge__", [](const Tensor& a, nb::handle b) { return compare(ge, a, b); });

  constexpr const char* tril_doc =
      "torch.tril: a copy with the elements above the `diagonal`-th diagonal of the last two "
      "dimensions zeroed (0 the main one, > 0 above, < 0 below); any dtype. ShapeError for fewer "
      "than 2 dimensions.";
  constexpr const char* triu_doc =
      "torch.triu: a copy with the elements below the `diagonal`-th diagonal zeroed; as tril.";
  m.def("tril", &tril, "input"_a, "diagonal"_a = 0, tril_doc);
  m.def("triu", &triu, "input"_a, "diagonal"_a = 0, triu_doc);
  c.def("tril", &tril, "diagonal"_a = 0, tril_doc).def("triu", &triu, "diagonal"_a = 0, triu_doc);
  constexpr const char* masked_fill_doc =
      "torch.Tensor.masked_fill: `value` (a number or a 0-d tensor) where `mask` is nonzero. The "
      "mask is int64 or float 0/1 (torch's bool; a comparison's result) and broadcasts with the "
      "tensor. ShapeError when they do not broadcast; ValueError for a 0-d value that is not, or "
      "a value an int64 tensor cannot hold; TypeError for a value that is not a number.";
  m.def("masked_fill", [](const Tensor& a, const Tensor& mask, nb::handle v) {
    return masked_fill(a, mask, value_of(v));
  }, "input"_a, "mask"_a, "value"_a, masked_fill_doc);
  c.def("masked_fill", [](const Tensor& a, const Tensor& mask, nb::handle v) {
    return masked_fill(a, mask, value_of(v));
  }, "mask"_a, "value"_a, masked_fill_doc);
  m.def("where", &where_of, "condition"_a, "input"_a, "other"_a,
        "torch.where(condition, input, other): input where condition (int64 or float, nonzero "
        "true) else other, in the three's broadcast shape; input and other are tensors of one "
        "dtype or numbers. DTypeError for two dtypes, ShapeError when the shapes do not "
        "broadcast.");
  c.def("where", [](const Tensor& self, const Tensor& cond, nb::handle other) {
    return where_of(cond, nb::cast(self), other);
  }, "condition"_a, "other"_a);
  constexpr const char* topk_doc =
      "torch.topk: (values, indices) of the k largest (or smallest) elements along `dim`, sorted, "
      "NaN largest, ties lowest index first; indices int64. IndexError for a dim outside the "
      "tensor, ValueError for k outside [0, size(dim)].";
  m.def("topk", &topk_result, "input"_a, "k"_a, "dim"_a = -1, "largest"_a = true, "sorted"_a = true,
        nb::sig("def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, "
                "sorted: bool = True) -> tuple[Tensor, Tensor]"), topk_doc);
  c.def("topk", &topk_result, "k"_a, "dim"_a = -1, "largest"_a = true, "sorted"_a = true,
        nb::sig("def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) "
                "-> tuple[Tensor, Tensor]"), topk_doc);
  auto sample = [](const Tensor& p, std::int64_t n, bool replacement, Generator* g) {
    return multinomial(p, n, replacement, g);
  };
  constexpr const char* multinomial_doc =
      "torch.multinomial: num_samples int64 category indices per row of `input` ([C] or [R, C] "
      "non-negative weights, float), with or without replacement, from `generator` or the "
      "default one: torch's distribution, not torch's stream. DTypeError for int64 weights, "
      "ShapeError for another rank, ValueError for num_samples <= 0, more samples than "
      "categories without replacement, a negative/inf/NaN weight or a zero row.";
  m.def("multinomial", sample, "input"_a, "num_samples"_a, "replacement"_a = false, nb::kw_only(),
        "generator"_a = nb::none(), multinomial_doc);
  c.def("multinomial", sample, "num_samples"_a, "replacement"_a = false, nb::kw_only(),
        "generator"_a = nb::none(), multinomial_doc);
}

}  // namespace lockstep::python
