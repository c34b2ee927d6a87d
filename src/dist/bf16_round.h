// bfloat16's round trip (internal; work.cpp): what the BFloat16 wire format does to a float32
// value where no two-byte element travels, shared by the base class's emulation and the mpi
// group's one-rank all-reduce so that both give the bits of to_bfloat16_bits.
#pragma once

#include <cstdint>

namespace lockstep::dist::detail {

/// values[i] = from_bfloat16_bits(to_bfloat16_bits(values[i])) for i < n, in place: each value
/// rounded to the nearest bfloat16 (ties to even; a NaN stays a quiet NaN), widened back.
void round_to_bfloat16(float* values, std::int64_t n);

}  // namespace lockstep::dist::detail
