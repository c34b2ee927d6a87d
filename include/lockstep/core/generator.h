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

/// The generator used when none is passed (torch.default_generator): the process-wide one, or on
/// a thread inside a DefaultGeneratorGuard the guard's generator. Draws through the ops lock its
/// mutex, so threads may share it (their interleaving then decides who gets which numbers).
Generator& default_generator();

/// While alive, default_generator() on this thread returns `g` instead of the process-wide one
/// (guards nest). nn::Cloneable::clone() uses it so that re-creating a module's parameters for
/// the copy draws from a scratch generator and leaves the process-wide stream untouched, also
/// while other threads draw from it.
class DefaultGeneratorGuard {
 public:
  explicit DefaultGeneratorGuard(Generator& g);
  ~DefaultGeneratorGuard();
  DefaultGeneratorGuard(const DefaultGeneratorGuard&) = delete;
  DefaultGeneratorGuard& operator=(const DefaultGeneratorGuard&) = delete;

 private:
  Generator* previous_;
};

/// Seeds the default generator (torch.manual_seed).
void manual_seed(std::uint64_t seed);

}  // namespace lockstep
