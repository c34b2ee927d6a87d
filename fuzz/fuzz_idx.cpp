// libFuzzer target for the MNIST IDX readers (raw and gzipped input): any input must either
// parse into consistent tensors or throw a lockstep::Error; anything else (a crash, a sanitizer
// report, another exception, a broken invariant) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lockstep/core/error.h"
#include "lockstep/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    lockstep::Tensor x = lockstep::data::parse_idx_images(bytes, "fuzz-images");
    if (x.dim() != 2 || x.size(0) < 1 || x.size(1) < 1 || x.dtype() != lockstep::kFloat32)
      __builtin_trap();
    const float* p = x.data_ptr<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i)
      if (!(p[i] >= 0.0f && p[i] <= 1.0f)) __builtin_trap();
  } catch (const lockstep::Error&) {
  }
  try {
    lockstep::Tensor y = lockstep::data::parse_idx_labels(bytes, "fuzz-labels");
    if (y.dim() != 1 || y.size(0) < 1 || y.dtype() != lockstep::kInt64) __builtin_trap();
    const std::int64_t* p = y.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < y.numel(); ++i)
      if (p[i] < 0 || p[i] > 255) __builtin_trap();
  } catch (const lockstep::Error&) {
  }
  return 0;
}
