// Weights files (--init, --save, --weights): safetensors holding exactly a model's state_dict,
// float32, under PyTorch's names (safetensors.torch.save_file(model.state_dict()) and our files
// are interchangeable).
#pragma once

#include <map>
#include <string>

#include "lockstep/nn/module.h"

namespace lockstep::app {

/// Loads `path` into `model` strictly (every name and shape must match, as PyTorch's
/// load_state_dict(strict=True)). Every error names `flag` and `path`: IoError (unreadable),
/// DataError (not a valid safetensors file, or a tensor holding NaN or Inf: the name, shape and
/// flat index of the first such element), StateDictError (missing or unexpected names, a shape
/// or a dtype other than float32). `model` is unchanged when it throws.
void load_weights(nn::Module& model, const std::string& path, const std::string& flag);

/// Writes model.state_dict() (float32) to `path` atomically, with `metadata` as the
/// safetensors `__metadata__` (a gpt: model's vocabulary and spec). IoError naming the path.
void save_weights(const nn::Module& model, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});

/// The size in bytes of the regular file `path` names (links followed); 0 when it is not one or
/// cannot be looked at (its read reports why).
long double file_size_or_zero(const std::string& path);

}  // namespace lockstep::app
