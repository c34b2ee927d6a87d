// StateDict (lockstep/core/state_dict.h): the ordered name -> tensor map.
#include "lockstep/core/state_dict.h"

#include "lockstep/core/error.h"

namespace lockstep {

void StateDict::insert(const std::string& name, const Tensor& t) {
  for (auto& [k, v] : items_)
    if (k == name) {
      v = t;
      return;
    }
  items_.emplace_back(name, t);
}

const Tensor* StateDict::find(const std::string& name) const {
  for (const auto& [k, v] : items_)
    if (k == name) return &v;
  return nullptr;
}

const Tensor& StateDict::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  throw StateDictError("state_dict has no key '" + name + "'");
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

}  // namespace lockstep
