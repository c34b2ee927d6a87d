// Weights files (see weights.h).
#include "weights.h"

#include "lockstep/core/error.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::app {

void load_weights(nn::Module& model, const std::string& path, const std::string& flag) {
  const std::string where = flag + " " + path + ": ";
  safetensors::File file;
  try {
    file = safetensors::load_file(path);
  } catch (const IoError& e) {
    throw IoError(flag + ": " + e.what());
  } catch (const DataError& e) {
    throw DataError(flag + ": " + e.what());
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
  safetensors::save_state_dict(model.state_dict(), path);
}

}  // namespace lockstep::app
