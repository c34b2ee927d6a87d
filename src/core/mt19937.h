// Internal: the Mersenne Twister of PyTorch's CPU generator (at::mt19937,
// aten/src/ATen/core/MT19937RNGEngine.h; Matsumoto & Nishimura, mt19937ar-cok.c). Seeding keeps
// the low 32 bits of the seed (init_genrand), so its words equal std::mt19937(seed & 0xffffffff)'s;
// `left` and `next` are kept as at::mt19937 keeps them so that torch.get_rng_state's layout can
// be written and read back (src/core/generator_state.cpp).
#pragma once

#include <array>
#include <cstdint>

#include "lockstep/core/generator.h"

namespace lockstep::detail {

struct MT19937 {
  static constexpr int kN = 624, kM = 397;
  std::array<std::uint32_t, kN> state{};
  int left = 1;            // words left before the next twist, + 1 (at::mt19937's left_)
  std::uint32_t next = 0;  // index of the next word in `state` (next_)

  /// init_genrand(seed & 0xffffffff); the first call twists.
  void seed(std::uint64_t s) {
    state[0] = static_cast<std::uint32_t>(s);
    for (int j = 1; j < kN; ++j)
      state[j] =
          1812433253u * (state[j - 1] ^ (state[j - 1] >> 30)) + static_cast<std::uint32_t>(j);
    left = 1;
    next = 0;
  }

  /// The next 32-bit word (at::mt19937::operator()).
  std::uint32_t operator()() {
    if (--left == 0) twist();
    std::uint32_t y = state[next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  /// True when `left` and `next` are in the ranges at::mt19937::is_valid accepts.
  bool valid() const { return left > 0 && left <= kN && next <= static_cast<std::uint32_t>(kN); }

 private:
  static std::uint32_t mix(std::uint32_t u, std::uint32_t v) {
    const std::uint32_t y = (u & 0x80000000u) | (v & 0x7fffffffu);
    return (y >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
  }
  void twist() {
    left = kN;
    next = 0;
    int j = 0;
    for (; j < kN - kM; ++j) state[j] = state[j + kM] ^ mix(state[j], state[j + 1]);
    for (; j < kN - 1; ++j) state[j] = state[j + kM - kN] ^ mix(state[j], state[j + 1]);
    state[kN - 1] = state[kM - 1] ^ mix(state[kN - 1], state[0]);
  }
};

}  // namespace lockstep::detail

namespace lockstep {
/// Generator's MT19937 state (the type is private to Generator; defined here for its .cpp files).
struct Generator::MT : detail::MT19937 {};
}  // namespace lockstep
