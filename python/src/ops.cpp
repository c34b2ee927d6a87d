// The ops as torch spells them: functions in lockstep._C (re-exported by lockstep and
// lockstep.nn.functional) and the matching Tensor methods and operators. Each is one call into
// include/lockstep/ops/; the arguments torch takes as an int or a pair (kernel_size, stride,
// padding) are widened here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bind.h"
#include "lockstep/autograd/grad_mode.h"
#include "lockstep/ops/loss.h"
#include "lockstep/ops/ops.h"

namespace lockstep::python {

namespace {

using namespace nb::literals;

// torch's int-or-pair arguments.
Size2 pair_of(nb::handle h, const char* what) {
  if (nb::isinstance<nb::int_>(h)) {
    const auto v = nb::cast<std::int64_t>(h);
    return {v, v};
  }
  if (nb::isinstance<nb::tuple>(h) || nb::isinstance<nb::list>(h)) {
    auto v = nb::cast<std::vector<std::int64_t>>(h);
    if (v.size() == 2) return {v[0], v[1]};
  }
  throw nb::type_error((std::string(what) + " must be an int or a pair of ints").c_str());
}

// A Python scalar against an int64 tensor: a float scalar promotes the tensor to float32, as
// torch's type promotion (torch.tensor([1]) + 1.0 is tensor([2.])).
Tensor promote_for(const Tensor& a, nb::handle s) {
  if (a.dtype() == DType::Int64 && nb::isinstance<nb::float_>(s)) return a.to(DType::Float32);
  return a;
}

// The shape arguments of view/reshape: view(2, 3), view((2, 3)), view([2, 3]).
Shape shape_args(const nb::args& args) {
  if (args.size() == 1 && !nb::isinstance<nb::int_>(args[0]))
    return Shape(nb::cast<std::vector<std::int64_t>>(args[0]));
  return Shape(nb::cast<std::vector<std::int64_t>>(args));
}

int wrap_dim(int d, int ndim, const char* what) {
  const int n = ndim == 0 ? 1 : ndim;
  if (d < -n || d >= n)
    throw IndexError(std::string(what) + ": dimension " + std::to_string(d) +
                     " out of range for a " + std::to_string(ndim) + "-d tensor");
  return d < 0 ? d + n : d;
}

Tensor unsqueeze(const Tensor& a, int dim) {
  const int d = wrap_dim(dim, a.dim() + 1, "unsqueeze");
  std::vector<std::int64_t> s = a.sizes();
  s.insert(s.begin() + d, 1);
  return a.reshape(Shape(s));
}

Tensor squeeze(const Tensor& a, std::optional<int> dim) {
  std::vector<std::int64_t> s;
  const int only = dim ? wrap_dim(*dim, a.dim(), "squeeze") : -1;
  for (int i = 0; i < a.dim(); ++i)
    if (a.size(i) != 1 || (dim && i != only)) s.push_back(a.size(i));
  return a.reshape(Shape(s));
}

// A Python number (int, float, bool) or a 0-d value such as numpy's float64; TypeError otherwise.
double scalar_of(nb::handle s) {
  if (nb::isinstance<nb::int_>(s) || nb::isinstance<nb::float_>(s) || PyNumber_Check(s.ptr()))
    if (!nb::isinstance<nb::str>(s)) return nb::cast<double>(s);
  throw nb::type_error(("unsupported operand type: " +
                        nb::cast<std::string>(nb::str(s.type().attr("__name__"))) +
                        " (expected a Tensor or a number)").c_str());
}

Tensor binary(const Tensor& a, nb::handle b, Tensor (*tt)(const Tensor&, const Tensor&),
              Tensor (*ts)(const Tensor&, double)) {
  if (nb::isinstance<Tensor>(b)) return tt(a, nb::cast<const Tensor&>(b));
  const double v = scalar_of(b);
  const Tensor x = promote_for(a, b);
  return ts(x, v);
}

Tensor scalar_like(nb::handle s, const Tensor& a) {
  const double v = scalar_of(s);
  const Tensor x = promote_for(a, s);
  return scalar_tensor(v, x.options());
}

// a op= b as torch does it, in place: the result must keep a's dtype (DTypeError otherwise: torch's
// "result type Float can't be cast to the desired output type Long") and shape. Lockstep's in-place
// ops are not recorded by autograd, so where autograd must see the update — a non-leaf that
// requires grad, or an operand that does, under grad mode — the out-of-place result is returned
// and Python rebinds the name (`loss += reg` then differentiates through both terms). A leaf that
// requires grad is written in place, which copy_ refuses with AutogradError, as torch does.
Tensor inplace(Tensor& a, nb::handle b, Tensor (*tt)(const Tensor&, const Tensor&),
               Tensor (*ts)(const Tensor&, double), const char* op) {
  const bool is_tensor = nb::isinstance<Tensor>(b);
  const Tensor r = is_tensor ? tt(a, nb::cast<const Tensor&>(b)) : ts(promote_for(a, b), scalar_of(b));
  if (GradMode::is_enabled() &&
      ((a.requires_grad() && !a.is_leaf()) || (is_tensor && nb::cast<const Tensor&>(b).requires_grad())))
    return r;
  if (r.dtype() != a.dtype())
    throw DTypeError(std::string("in-place ") + op + ": result type " + to_string(r.dtype()) +
                     " can't be cast to the desired output type " + to_string(a.dtype()));
  if (r.shape() != a.shape())
    throw ShapeError(std::string("in-place ") + op + ": output with shape " + a.shape().str() +
                     " doesn't match the broadcast shape " + r.shape().str());
  a.copy_(r);
  return a;
}

Tensor div_tensor(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor div_scalar(const Tensor& a, double s) { return a / s; }

nb::object max_of(const Tensor& a, std::optional<int> dim, bool keepdim) {
  if (!dim) return nb::cast(max(a));
  auto [values, indices] = max(a, *dim, keepdim);
  return nb::make_tuple(values, indices);
}

}  // namespace

void bind_ops(nb::module_& m, nb::class_<Tensor>& c) {
  // ---- functions (torch.* and torch.nn.functional.*) ----
  m.def("add", [](const Tensor& a, nb::handle b) { return binary(a, b, add, add); }, "input"_a, "other"_a);
  m.def("sub", [](const Tensor& a, nb::handle b) { return binary(a, b, sub, sub); }, "input"_a, "other"_a);
  m.def("mul", [](const Tensor& a, nb::handle b) { return binary(a, b, mul, mul); }, "input"_a, "other"_a);
  m.def("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, "input"_a, "other"_a);
  m.def("div", [](const Tensor& a, double s) { return a / s; }, "input"_a, "other"_a);
  m.def("pow", [](const Tensor& a, double p) { return pow(a, p); }, "input"_a, "exponent"_a);
  m.def("neg", &neg, "input"_a);
  m.def("exp", &exp, "input"_a);
  m.def("log", &log, "input"_a);
  m.def("sqrt", &sqrt, "input"_a);
  m.def("tanh", &tanh, "input"_a);
  m.def("sigmoid", &sigmoid, "input"_a);
  m.def("relu", [](const Tensor& a, bool inplace) { return relu(a); }, "input"_a, "inplace"_a = false);
  m.def("gelu", [](const Tensor& a, const std::string& approximate) { return gelu(a, approximate); },
        "input"_a, "approximate"_a = "none");
  m.def("matmul", [](const Tensor& a, const Tensor& b) {
    MaybeReleaseGil r(worth_releasing_gil(a) || worth_releasing_gil(b));
    return matmul(a, b);
  }, "input"_a, "other"_a);
  m.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
    MaybeReleaseGil r(worth_releasing_gil(x) || worth_releasing_gil(w));
    return linear(x, w, b ? *b : Tensor());
  }, "input"_a, "weight"_a, "bias"_a = nb::none());
  m.def("sum", [](const Tensor& a) { return sum(a); }, "input"_a);
  m.def("sum", [](const Tensor& a, int dim, bool keepdim) { return sum(a, dim, keepdim); },
        "input"_a, "dim"_a, "keepdim"_a = false);
  m.def("mean", [](const Tensor& a) { return mean(a); }, "input"_a);
  m.def("mean", [](const Tensor& a, int dim, bool keepdim) { return mean(a, dim, keepdim); },
        "input"_a, "dim"_a, "keepdim"_a = false);
  m.def("max", &max_of, "input"_a, "dim"_a = nb::none(), "keepdim"_a = false);
  m.def("argmax", [](const Tensor& a, std::optional<int> dim, bool keepdim) {
    return dim ? argmax(a, *dim, keepdim) : argmax(a);
  }, "input"_a, "dim"_a = nb::none(), "keepdim"_a = false);
  m.def("softmax", [](const Tensor& a, int dim) { return softmax(a, dim); }, "input"_a, "dim"_a);
  m.def("log_softmax", [](const Tensor& a, int dim) { return log_softmax(a, dim); }, "input"_a, "dim"_a);
  m.def("reshape", [](const Tensor& a, const std::vector<std::int64_t>& s) { return reshape(a, Shape(s)); },
        "input"_a, "shape"_a);
  m.def("flatten", [](const Tensor& a, int s, int e) { return flatten(a, s, e); }, "input"_a,
        "start_dim"_a = 0, "end_dim"_a = -1);
  m.def("transpose", [](const Tensor& a, int d0, int d1) { return transpose(a, d0, d1); },
        "input"_a, "dim0"_a, "dim1"_a);
  m.def("permute", [](const Tensor& a, const std::vector<int>& dims) { return permute(a, dims); },
        "input"_a, "dims"_a);
  m.def("unsqueeze", &unsqueeze, "input"_a, "dim"_a);
  m.def("squeeze", &squeeze, "input"_a, "dim"_a = nb::none());
  m.def("narrow", [](const Tensor& a, int d, std::int64_t s, std::int64_t l) { return narrow(a, d, s, l); },
        "input"_a, "dim"_a, "start"_a, "length"_a);
  m.def("index_select", [](const Tensor& a, int d, const Tensor& i) { return index_select(a, d, i); },
        "input"_a, "dim"_a, "index"_a);
  m.def("cat", [](const std::vector<Tensor>& ts, int dim) { return cat(ts, dim); }, "tensors"_a,
        "dim"_a = 0);
  m.def("stack", [](const std::vector<Tensor>& ts, int dim) {
    std::vector<Tensor> u;
    u.reserve(ts.size());
    for (const Tensor& t : ts) u.push_back(unsqueeze(t, dim));
    return cat(u, dim);
  }, "tensors"_a, "dim"_a = 0);
  m.def("chunk", [](const Tensor& a, std::int64_t c, int d) { return chunk(a, c, d); }, "input"_a,
        "chunks"_a, "dim"_a = 0);
  m.def("tensor_split", [](const Tensor& a, std::int64_t s, int d) { return tensor_split(a, s, d); },
        "input"_a, "sections"_a, "dim"_a = 0);
  m.def("split", [](const Tensor& a, std::int64_t s, int d) { return split(a, s, d); }, "tensor"_a,
        "split_size_or_sections"_a, "dim"_a = 0);
  m.def("cross_entropy", [](const Tensor& x, const Tensor& t, std::int64_t ignore_index,
                            const std::string& reduction) {
    return cross_entropy(x, t, ignore_index, reduction_from(reduction));
  }, "input"_a, "target"_a, "ignore_index"_a = -100, "reduction"_a = "mean");
  m.def("nll_loss", [](const Tensor& x, const Tensor& t, std::int64_t ignore_index,
                       const std::string& reduction) {
    return nll_loss(x, t, ignore_index, reduction_from(reduction));
  }, "input"_a, "target"_a, "ignore_index"_a = -100, "reduction"_a = "mean");
  m.def("mse_loss", [](const Tensor& x, const Tensor& t, const std::string& reduction) {
    return mse_loss(x, t, reduction_from(reduction));
  }, "input"_a, "target"_a, "reduction"_a = "mean");
  m.def("dropout", [](const Tensor& x, double p, bool training, bool inplace) {
    return dropout(x, p, training);
  }, "input"_a, "p"_a = 0.5, "training"_a = true, "inplace"_a = false);
  m.def("conv2d", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, nb::handle stride,
                     nb::handle padding, nb::handle dilation, std::int64_t groups) {
    const Size2 s = pair_of(stride, "stride"), p = pair_of(padding, "padding"),
                d = pair_of(dilation, "dilation");
    MaybeReleaseGil r(worth_releasing_gil(x));
    return conv2d(x, w, b ? *b : Tensor(), s, p, d, groups);
  }, "input"_a, "weight"_a, "bias"_a = nb::none(), "stride"_a = 1, "padding"_a = 0,
        "dilation"_a = 1, "groups"_a = 1);
  m.def("max_pool2d", [](const Tensor& x, nb::handle k, nb::handle stride, nb::handle padding) {
    std::optional<Size2> s;
    if (!stride.is_none()) s = pair_of(stride, "stride");
    return max_pool2d(x, pair_of(k, "kernel_size"), s, pair_of(padding, "padding"));
  }, "input"_a, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0);
  m.def("avg_pool2d", [](const Tensor& x, nb::handle k, nb::handle stride, nb::handle padding) {
    std::optional<Size2> s;
    if (!stride.is_none()) s = pair_of(stride, "stride");
    return avg_pool2d(x, pair_of(k, "kernel_size"), s, pair_of(padding, "padding"));
  }, "input"_a, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0);
  m.def("adaptive_avg_pool2d", [](const Tensor& x, nb::handle out) {
    return adaptive_avg_pool2d(x, pair_of(out, "output_size"));
  }, "input"_a, "output_size"_a);
  m.def("layer_norm", [](const Tensor& x, const std::vector<std::int64_t>& shape,
                         std::optional<Tensor> w, std::optional<Tensor> b, double eps) {
    return layer_norm(x, Shape(shape), w ? *w : Tensor(), b ? *b : Tensor(), eps);
  }, "input"_a, "normalized_shape"_a, "weight"_a = nb::none(), "bias"_a = nb::none(), "eps"_a = 1e-5);
  m.def("embedding", [](const Tensor& i, const Tensor& w) { return embedding(w, i); }, "input"_a, "weight"_a);
  m.def("batch_norm", [](const Tensor& x, std::optional<Tensor> rm, std::optional<Tensor> rv,
                         std::optional<Tensor> w, std::optional<Tensor> b, bool training,
                         double momentum, double eps) {
    return batch_norm(x, rm ? *rm : Tensor(), rv ? *rv : Tensor(), w ? *w : Tensor(),
                      b ? *b : Tensor(), training, momentum, eps);
  }, "input"_a, "running_mean"_a.none(), "running_var"_a.none(), "weight"_a = nb::none(),
        "bias"_a = nb::none(), "training"_a = false, "momentum"_a = 0.1, "eps"_a = 1e-5);
  m.def("scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v,
                                           nb::handle attn_mask, double dropout_p, bool is_causal,
                                           std::optional<double> scale) {
    if (!attn_mask.is_none())
      throw ValueError("scaled_dot_product_attention: attn_mask is not supported (use is_causal)");
    nb::gil_scoped_release r;
    return scaled_dot_product_attention(q, k, v, is_causal, dropout_p, scale);
  }, "query"_a, "key"_a, "value"_a, "attn_mask"_a = nb::none(), "dropout_p"_a = 0.0,
        "is_causal"_a = false, "scale"_a = nb::none());

  // ---- Tensor methods and operators ----
  c.def("__add__", [](const Tensor& a, nb::handle b) { return binary(a, b, add, add); })
      .def("__radd__", [](const Tensor& a, nb::handle b) { return binary(a, b, add, add); })
      .def("__sub__", [](const Tensor& a, nb::handle b) { return binary(a, b, sub, sub); })
      .def("__rsub__", [](const Tensor& a, nb::handle b) { return sub(scalar_like(b, a), promote_for(a, b)); })
      .def("__mul__", [](const Tensor& a, nb::handle b) { return binary(a, b, mul, mul); })
      .def("__rmul__", [](const Tensor& a, nb::handle b) { return binary(a, b, mul, mul); })
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return div(a, b); })
      .def("__truediv__", [](const Tensor& a, double s) { return a / s; })
      .def("__rtruediv__", [](const Tensor& a, double s) {
        const Tensor f = a.dtype() == DType::Int64 ? a.to(DType::Float32) : a;
        return div(scalar_tensor(s, f.options()), f);
      })
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__pow__", [](const Tensor& a, double p) { return pow(a, p); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) {
        MaybeReleaseGil r(worth_releasing_gil(a) || worth_releasing_gil(b));
        return matmul(a, b);
      })
      .def("__iadd__", [](Tensor& a, nb::handle b) { return inplace(a, b, add, add, "+="); })
      .def("__isub__", [](Tensor& a, nb::handle b) { return inplace(a, b, sub, sub, "-="); })
      .def("__imul__", [](Tensor& a, nb::handle b) { return inplace(a, b, mul, mul, "*="); })
      .def("__itruediv__", [](Tensor& a, nb::handle b) {
        return inplace(a, b, div_tensor, div_scalar, "/=");
      })
      .def("add_", [](Tensor& a, const Tensor& b, double alpha) { return a.add_(b, alpha); },
           "other"_a, "alpha"_a = 1.0)
      .def("add_", [](Tensor& a, double s, double alpha) { return a.add_(scalar_tensor(s * alpha, a.options())); },
           "other"_a, "alpha"_a = 1.0)
      .def("mul_", [](Tensor& a, double s) { return a.mul_(s); }, "other"_a)
      .def("add", [](const Tensor& a, nb::handle b) { return binary(a, b, add, add); }, "other"_a)
      .def("sub", [](const Tensor& a, nb::handle b) { return binary(a, b, sub, sub); }, "other"_a)
      .def("mul", [](const Tensor& a, nb::handle b) { return binary(a, b, mul, mul); }, "other"_a)
      .def("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, "other"_a)
      .def("div", [](const Tensor& a, double s) { return a / s; }, "other"_a)
      .def("pow", [](const Tensor& a, double p) { return pow(a, p); }, "exponent"_a)
      .def("neg", [](const Tensor& a) { return neg(a); })
      .def("exp", [](const Tensor& a) { return exp(a); })
      .def("log", [](const Tensor& a) { return log(a); })
      .def("sqrt", [](const Tensor& a) { return sqrt(a); })
      .def("tanh", [](const Tensor& a) { return tanh(a); })
      .def("sigmoid", [](const Tensor& a) { return sigmoid(a); })
      .def("relu", [](const Tensor& a) { return relu(a); })
      .def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, "other"_a)
      .def("sum", [](const Tensor& a) { return sum(a); })
      .def("sum", [](const Tensor& a, int dim, bool keepdim) { return sum(a, dim, keepdim); }, "dim"_a,
           "keepdim"_a = false)
      .def("mean", [](const Tensor& a) { return mean(a); })
      .def("mean", [](const Tensor& a, int dim, bool keepdim) { return mean(a, dim, keepdim); },
           "dim"_a, "keepdim"_a = false)
      .def("max", &max_of, "dim"_a = nb::none(), "keepdim"_a = false)
      .def("argmax", [](const Tensor& a, std::optional<int> dim, bool keepdim) {
        return dim ? argmax(a, *dim, keepdim) : argmax(a);
      }, "dim"_a = nb::none(), "keepdim"_a = false)
      .def("softmax", [](const Tensor& a, int dim) { return softmax(a, dim); }, "dim"_a)
      .def("log_softmax", [](const Tensor& a, int dim) { return log_softmax(a, dim); }, "dim"_a)
      .def("view", [](const Tensor& a, nb::args s) { return a.reshape(shape_args(s)); })
      .def("reshape", [](const Tensor& a, nb::args s) { return a.reshape(shape_args(s)); })
      .def("view_as", [](const Tensor& a, const Tensor& o) { return a.reshape(o.shape()); }, "other"_a)
      .def("flatten", [](const Tensor& a, int s, int e) { return flatten(a, s, e); }, "start_dim"_a = 0,
           "end_dim"_a = -1)
      .def("t", [](const Tensor& a) { return t(a); })
      .def_prop_ro("T", [](const Tensor& a) { return a.dim() < 2 ? a : t(a); })
      .def("transpose", [](const Tensor& a, int d0, int d1) { return transpose(a, d0, d1); }, "dim0"_a, "dim1"_a)
      .def("permute", [](const Tensor& a, nb::args dims) {
        if (dims.size() == 1 && !nb::isinstance<nb::int_>(dims[0]))
          return permute(a, nb::cast<std::vector<int>>(dims[0]));
        return permute(a, nb::cast<std::vector<int>>(dims));
      })
      .def("unsqueeze", &unsqueeze, "dim"_a)
      .def("squeeze", &squeeze, "dim"_a = nb::none())
      .def("narrow", [](const Tensor& a, int d, std::int64_t s, std::int64_t l) { return narrow(a, d, s, l); },
           "dim"_a, "start"_a, "length"_a)
      .def("index_select", [](const Tensor& a, int d, const Tensor& i) { return index_select(a, d, i); },
           "dim"_a, "index"_a)
      .def("chunk", [](const Tensor& a, std::int64_t c, int d) { return chunk(a, c, d); }, "chunks"_a, "dim"_a = 0)
      .def("split", [](const Tensor& a, std::int64_t s, int d) { return split(a, s, d); },
           "split_size"_a, "dim"_a = 0);
}

}  // namespace lockstep::python
