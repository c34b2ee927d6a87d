// StateDict: an ordered name -> tensor map, as PyTorch's state_dict (an OrderedDict). In core, the
// lowest layer that can hold it (it needs only Tensor): modules (nn), optimizers and schedulers
// (optim) fill it, safetensors files (io) hold it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  /// Appends or replaces `name`.
  void insert(const std::string& name, const Tensor& t);
  /// nullptr when absent.
  const Tensor* find(const std::string& name) const;
  /// Throws StateDictError naming the key when absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
};

}  // namespace lockstep
