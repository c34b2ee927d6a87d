// libFuzzer target for the CSV reader. The first input byte (as a signed byte) is the label
// column, the rest is the file's text. Any input must either parse into consistent tensors or
// throw a lockstep::Error; anything else (a crash, a sanitizer report, another exception, a
// broken invariant) is a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lockstep/core/error.h"
#include "lockstep/data/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  lockstep::data::CsvOptions options;
  options.label_column = static_cast<std::int8_t>(data[0]);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    lockstep::data::LabeledData d = lockstep::data::parse_csv(text, "fuzz.csv", options);
    const lockstep::Tensor& x = d.features;
    const lockstep::Tensor& y = d.labels;
    if (x.dim() != 2 || y.dim() != 1 || x.size(0) != y.size(0) || x.size(0) < 1 || x.size(1) < 1 ||
        x.dtype() != lockstep::kFloat32 || y.dtype() != lockstep::kInt64)
      __builtin_trap();
    const float* xp = x.data_ptr<float>();
    for (std::int64_t i = 0; i < x.numel(); ++i)
      if (!std::isfinite(xp[i])) __builtin_trap();
    const std::int64_t* yp = y.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < y.numel(); ++i)
      if (yp[i] < 0) __builtin_trap();
  } catch (const lockstep::Error&) {
  }
  return 0;
}
