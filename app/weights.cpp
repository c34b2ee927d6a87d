// Weights files (see weights.h).
#include "weights.h"

#include "lib_seams.h"
#include "lockstep/core/error.h"

namespace lockstep::app {

void load_weights(nn::Module& model, const std::string& path, const std::string& flag) {
  const std::string where = flag + " " + path + ": ";
  seams::TensorFile file;
  try {
    file = seams::load_tensors(path);
  } catch (const IoError& e) {
    throw IoError(flag + " " + e.what());
  } catch (const DataError& e) {
    throw DataError(flag + " " + e.what());
  }
  StateDict state;
  for (const auto& [name, t] : file.tensors) {
    if (t.dtype() != DType::Float32)
      throw StateDictError(where + "tensor '" + name + "' has dtype " + to_string(t.dtype()) +
                           ", expected float32");
    state.insert(name, t);
  }
  try {
    model.load_state_dict(state, /*strict=*/true);
  } catch (const StateDictError& e) {
    throw StateDictError(where + e.what());
  }
}

void save_weights(const nn::Module& model, const std::string& path) {
  seams::NamedTensors tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(name, t);
  seams::save_tensors(tensors, path, {});
}

}  // namespace lockstep::app
