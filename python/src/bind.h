// Shared declarations of the native extension lockstep._C: one bind_* function per layer, each in
// its own file, all a thin shell over include/lockstep/ (no kernel, rule or check lives here that
// a C++ user would not also get).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/core/state_dict.h"

namespace lockstep::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_tensor(nb::module_& m);
/// Called by bind_tensor with the Tensor class being built.
void bind_interop(nb::module_& m, nb::class_<Tensor>& c);
void bind_ops(nb::module_& m, nb::class_<Tensor>& c);
/// Comparisons, tril/triu, masked_fill, where, topk, multinomial (selection.cpp).
void bind_selection(nb::module_& m, nb::class_<Tensor>& c);
void bind_indexing(nb::class_<Tensor>& c);
void bind_factories(nb::module_& m, nb::class_<Tensor>& c);
void bind_nn(nb::module_& m);
/// Called by bind_nn once Module is bound.
void bind_layers(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_io(nb::module_& m);
void bind_data(nb::module_& m);
void bind_parallel(nb::module_& m);
/// nanoGPT's GPT and ResNet-20 (models.cpp), after bind_nn.
void bind_models(nb::module_& m);

/// Whether a call on `x` should run without the GIL: long enough (>= 32K elements) that another
/// Python thread (a DataParallel replica's forward) gains from running meanwhile. Below that a
/// release and re-acquire, a hand-off between threads when another waits, costs more than the op.
inline bool worth_releasing_gil(const Tensor& x) { return x.numel() >= (1 << 15); }

/// Releases the GIL for its scope when `release` (nanobind's gil_scoped_release, conditional).
class MaybeReleaseGil {
 public:
  explicit MaybeReleaseGil(bool release) : state_(release ? PyEval_SaveThread() : nullptr) {}
  ~MaybeReleaseGil() {
    if (state_) PyEval_RestoreThread(state_);
  }
  MaybeReleaseGil(const MaybeReleaseGil&) = delete;
  MaybeReleaseGil& operator=(const MaybeReleaseGil&) = delete;

 private:
  PyThreadState* state_;
};

/// A shape from a Python sequence of ints (ValueError for a negative dimension comes from the
/// C++ factories themselves).
Shape to_shape(const std::vector<std::int64_t>& dims);

}  // namespace lockstep::python

namespace lockstep::python {
/// t.item() as a Python int (int64) or float; ValueError unless t has one element.
nb::object item_of(const Tensor& t);
/// t.tolist(): nested Python lists (a scalar for a 0-d tensor).
nb::object to_list(const Tensor& t);
}  // namespace lockstep::python

namespace lockstep::python {
/// A Python dict of name -> Tensor as a StateDict (TypeError for a non-tensor value), and back.
StateDict to_state_dict(nb::dict d);
nb::dict from_state_dict(const StateDict& sd);
}  // namespace lockstep::python
