// Seeded random number generation. The engine is Philox4x32-10 (Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3", SC 2011), a counter-based generator: the value at any position is
// a pure function of (seed, position), so streams can be keyed by (seed, step, sample index)
// independently of how work is split across devices. Streams differ from PyTorch's mt19937.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace lockstep {

/// One Philox4x32-10 block: 4 random 32-bit words for a 128-bit counter and a 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key);

/// A seeded stream of random numbers (torch.Generator). Not thread-safe: give each thread its
/// own, or lock (the default generator is locked by the factories that use it).
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) { manual_seed(seed); }

  /// Restarts the stream at position 0 of `seed`.
  void manual_seed(std::uint64_t seed);
  std::uint64_t seed() const { return seed_; }

  /// Position in the stream in 32-bit words: (seed, offset) is the whole state.
  std::uint64_t offset() const { return offset_; }
  void set_offset(std::uint64_t offset) { offset_ = offset; }

  std::uint32_t next_u32();
  std::uint64_t next_u64();
  /// Uniform float in [0, 1) with 24 random bits.
  float next_float();
  /// Uniform double in [0, 1) with 53 random bits.
  double next_double();
  /// Uniform integer in [0, n) without modulo bias (rejection sampling); n > 0.
  std::uint64_t next_below(std::uint64_t n);

  /// The mutex that guards the default generator.
  std::mutex& mutex() { return mu_; }

  Generator(const Generator& o) : seed_(o.seed_), offset_(o.offset_) {}
  Generator& operator=(const Generator& o) {
    seed_ = o.seed_;
    offset_ = o.offset_;
    return *this;
  }

 private:
  std::uint64_t seed_ = 0;
  std::uint64_t offset_ = 0;
  std::mutex mu_;
};

/// The process-wide generator used when none is passed (torch.default_generator).
Generator& default_generator();

/// Seeds the default generator (torch.manual_seed).
void manual_seed(std::uint64_t seed);

}  // namespace lockstep
