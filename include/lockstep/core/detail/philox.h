// Internal: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2,
// 3", SC 2011; the constants of cuRAND and Random123) as ONE function for the host and the GPU,
// and the ways Lockstep turns its words into numbers, so a CUDA kernel draws exactly the bits the
// CPU draws:
//   - philox_stream_word: word `offset` of a Generator's stream (Generator::next_u32);
//   - philox_stream_double: the double Generator::next_double returns when the stream stands at
//     word `offset` (two words, the high half first), used by the sequential dropout path;
//   - dropout_keyed_block: the four words of one column group of one row of dropout under a
//     DropoutKey.
// Plain C++17 with only integer operations: included from .cpp and .cu files alike.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LOCKSTEP_PHILOX_HD __host__ __device__
#else
#define LOCKSTEP_PHILOX_HD
#endif

namespace lockstep::detail {

/// c ← Philox4x32-10(c, key (k0, k1)): ten rounds, the key bumped by the Weyl constants.
LOCKSTEP_PHILOX_HD inline void philox4x32_10(std::uint32_t c[4], std::uint32_t k0,
                                             std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k0 += kW0;
    k1 += kW1;
  }
}

/// Word `offset` of the stream of `seed` (Generator::next_u32 at that position): block offset/4
/// as the counter (low, high, 0, 0), the seed as the key, word offset % 4 of the block.
LOCKSTEP_PHILOX_HD inline std::uint32_t philox_stream_word(std::uint64_t seed,
                                                           std::uint64_t offset) {
  const std::uint64_t block = offset >> 2;
  std::uint32_t c[4] = {static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                        0u, 0u};
  philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return c[offset & 3];
}

/// Generator::next_double at stream position `offset`: (word(offset) << 32 | word(offset + 1))
/// >> 11, times 2^-53 (53 random bits in [0, 1)); the stream then stands at offset + 2.
LOCKSTEP_PHILOX_HD inline double philox_stream_double(std::uint64_t seed, std::uint64_t offset) {
  const std::uint64_t hi = philox_stream_word(seed, offset);
  const std::uint64_t v = (hi << 32) | philox_stream_word(seed, offset + 1);
  return static_cast<double>(v >> 11) * 0x1.0p-53;
}

/// The four words of keyed dropout (lockstep::dropout under a DropoutKeyGuard) for column group
/// `group` (= j / 4) of row `row` (the global sample index, truncated to 32 bits) of dropout call
/// `call`: counter (row, step, call, group), key (seed low, seed high). Column j takes word j % 4.
LOCKSTEP_PHILOX_HD inline void dropout_keyed_block(std::uint64_t seed, std::uint64_t step,
                                                   std::uint32_t call, std::uint32_t row,
                                                   std::uint32_t group, std::uint32_t out[4]) {
  out[0] = row;
  out[1] = static_cast<std::uint32_t>(step);
  out[2] = call;
  out[3] = group;
  philox4x32_10(out, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// The keyed draw of one column: u = word · 2^-32 in [0, 1).
LOCKSTEP_PHILOX_HD inline double dropout_keyed_uniform(std::uint32_t word) {
  return static_cast<double>(word) * 0x1.0p-32;
}

/// One mask element: 0 where the uniform draw u is below p, else scale (1 / (1 − p); 0 when
/// p == 1), as lockstep::dropout writes it.
template <class T>
LOCKSTEP_PHILOX_HD inline T dropout_mask_value(double u, double p, T scale) {
  return u < p ? T(0) : scale;
}

/// One thread of the keyed dropout kernel: item e < rows · groups (groups = ceil(cols / 4)) is
/// column group e % groups of row e / groups; one Philox block gives its (up to) four mask
/// elements of the [rows, cols] mask.
template <class T>
LOCKSTEP_PHILOX_HD inline void dropout_keyed_group(T* mask, std::int64_t e, std::int64_t cols,
                                                   std::int64_t groups, std::uint64_t seed,
                                                   std::uint64_t step, std::uint32_t call,
                                                   std::int64_t sample_offset, double p, T scale) {
  const std::int64_t row = e / groups, group = e % groups;
  std::uint32_t words[4];
  dropout_keyed_block(seed, step, call, static_cast<std::uint32_t>(sample_offset + row),
                      static_cast<std::uint32_t>(group), words);
  for (int w = 0; w < 4; ++w) {
    const std::int64_t j = group * 4 + w;
    if (j >= cols) break;
    mask[row * cols + j] = dropout_mask_value<T>(dropout_keyed_uniform(words[w]), p, scale);
  }
}

}  // namespace lockstep::detail
