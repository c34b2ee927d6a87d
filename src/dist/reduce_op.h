// The element-wise functions of dist::ReduceOp, shared by the collective backends so that every
// backend combines values with exactly the same expressions (and therefore the same bits).
#pragma once

#include "lockstep/dist/process_group.h"

namespace lockstep::dist::detail {

// Calls f with the binary function of `op` on T as a distinct functor type, so the loops f runs
// are compiled per op (no per-element switch) and vectorise. Max/Min are `a > b ? a : b` and
// `a < b ? a : b` (with a NaN as b, a is kept; as a, the NaN is kept, in rank order).
template <class T, class F>
void with_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::Sum:
      return f([](T a, T b) { return a + b; });
    case ReduceOp::Max:
      return f([](T a, T b) { return a > b ? a : b; });
    case ReduceOp::Min:
      return f([](T a, T b) { return a < b ? a : b; });
  }
}

}  // namespace lockstep::dist::detail
