// The arguments of a forward with several inputs (PyTorch's forward(*args)): tensors and plain
// values in one list. Module::forward_args takes them; DataParallel scatters the tensors along
// dim 0 and hands the plain values to every replica unchanged (torch/nn/parallel/scatter_gather.py).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::nn {

/// One argument: a tensor, or a value that is not split (a flag, a scale, a mode name).
using Arg = std::variant<Tensor, double, std::int64_t, bool, std::string>;
using Args = std::vector<Arg>;

/// The tensor held by `arg`, or null when it holds a plain value.
inline const Tensor* tensor_arg(const Arg& arg) { return std::get_if<Tensor>(&arg); }

}  // namespace lockstep::nn
