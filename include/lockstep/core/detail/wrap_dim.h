// Internal: a possibly negative dimension index normalised, for Tensor::size (core) and every op
// that takes a dim (include/lockstep/ops/detail/op_utils.h includes this).
#pragma once

#include <string>

#include "lockstep/core/error.h"

namespace lockstep::detail {

/// Normalises a possibly negative dim; IndexError naming the op and shape when out of range.
inline int wrap_dim(const char* op, int dim, int ndim) {
  int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim)
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) +
                     " out of range for a " + std::to_string(ndim) + "-d tensor");
  return d;
}

}  // namespace lockstep::detail
