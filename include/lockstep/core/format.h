// Text of numbers for messages and fingerprints.
#pragma once

#include <cstdio>
#include <string>

namespace lockstep {

/// `v` with 17 significant digits (printf's "%.17g"): the same double always prints the same
/// text, which reads back as the same double (IEEE 754 binary64 needs 17 digits to round-trip).
inline std::string exact_string(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace lockstep
