// libFuzzer target for the safetensors reader: any input must either parse or throw a
// lockstep::Error (DataError for malformed files). Any other exception, a crash, a sanitizer
// report or an allocation beyond the input's size is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lockstep/core/error.h"
#include "lockstep/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = lockstep::safetensors::deserialize(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz-input");
    // Touch every tensor so that a wrong size or offset shows up under ASan.
    for (const auto& [name, t] : file.tensors) {
      volatile double sum = 0;
      if (t.numel() > 0) sum = sum + t.to_vector<double>().back();
    }
  } catch (const lockstep::Error&) {
  }
  return 0;
}
