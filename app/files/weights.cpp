// Weights files (see weights.h).
#include "files/weights.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

#include "files/checkpoint.h"
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
  if (is_checkpoint(file)) {
    const std::string dir = std::filesystem::path(path).parent_path().string();
    throw DataError(where +
                    "is a training checkpoint of --checkpoint-dir (model, optimizer state and "
                    "position), not a weights file: continue its run with --checkpoint-dir " +
                    (dir.empty() ? "." : dir) + " --resume; a weights file is what --save writes");
  }
  StateDict state;
  const StateDict mine = model.state_dict();
  for (const auto& [name, t] : file.tensors) {
    // Each tensor in the model's dtype for that key: float32 parameters and running
    // statistics, int64 counters (BatchNorm's num_batches_tracked); names the model lacks are
    // load_state_dict's to report.
    const Tensor* want = mine.find(name);
    if (!want) {  // load_state_dict names every unexpected key
      state.insert(name, t);
      continue;
    }
    const DType dtype = want->dtype();
    if (t.dtype() != dtype)
      throw StateDictError(where + "tensor '" + name + "' has dtype " + to_string(t.dtype()) +
                           ", expected " + to_string(dtype));
    if (dtype != DType::Float32) {
      state.insert(name, t);
      continue;
    }
    // A NaN or Inf parameter would only show up later as a NaN loss (eval would print
    // "loss nan" and succeed): refuse it here, naming the tensor and the element.
    const float* v = t.data_ptr<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(v[i]))
        throw DataError(where + "tensor '" + name + "' " + t.shape().str() + " holds " +
                        (std::isnan(v[i]) ? "NaN" : "an infinite value") + " at flat index " +
                        std::to_string(i));
    state.insert(name, t);
  }
  try {
    model.load_state_dict(state, /*strict=*/true);
  } catch (const StateDictError& e) {
    throw StateDictError(where + e.what());
  }
}

long double file_size_or_zero(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0.0L;
  return static_cast<long double>(st.st_size);
}

void save_weights(const nn::Module& model, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  safetensors::save_state_dict(model.state_dict(), path, metadata);
}

}  // namespace lockstep::app
