// Seeded random number generation (torch.Generator) with two engines:
//   - Engine::Philox (the default): Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As
//     Easy as 1, 2, 3", SC 2011), a counter-based generator: the value at any position is a pure
//     function of (seed, position), so a CUDA kernel draws the CPU's bits, a run resumes from
//     (seed, offset), and streams can be keyed by (seed, step, sample index) independently of how
//     work is split across devices. Its streams differ from PyTorch's.
//   - Engine::MT19937: PyTorch's CPU generator (at::CPUGeneratorImpl,
//     aten/src/ATen/CPUGeneratorImpl.cpp): the mt19937 that torch.manual_seed seeds and the two
//     normal-sample caches of Box-Muller. The factories and samplers draw through PyTorch's own
//     transformations on it (src/ops/torch_random.cpp), so after the same seed randn, rand,
//     randint, randperm, normal_, uniform_, random_ and bernoulli_ give torch's values bit for
//     bit (docs/design.md, "Random streams", says which draws cannot).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace lockstep {

/// One Philox4x32-10 block: 4 random 32-bit words for a 128-bit counter and a 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key);

/// A seeded stream of random numbers (torch.Generator). Not thread-safe: give each thread its
/// own, or lock (the default generator is locked by the factories that use it).
class Generator {
 public:
  enum class Engine { Philox, MT19937 /* PyTorch's CPU generator */ };

  explicit Generator(std::uint64_t seed = 0, Engine engine = Engine::Philox);

  Engine engine() const { return engine_; }
  /// Switches to `engine` and restarts it at the current seed (position 0, no cached normals).
  void set_engine(Engine engine);

  /// Restarts the stream at position 0 of `seed` (torch.Generator.manual_seed: MT19937 keeps the
  /// seed's low 32 bits for the words, and clears the normal caches).
  void manual_seed(std::uint64_t seed);
  std::uint64_t seed() const { return seed_; }

  /// Philox only: the position in the stream in 32-bit words, (seed, offset) being the whole
  /// state. ValueError for MT19937 (as torch's CPU generator, which "does not use offset").
  std::uint64_t offset() const;
  void set_offset(std::uint64_t offset);

  /// The next 32-bit word (CPUGeneratorImpl::random for MT19937).
  std::uint32_t next_u32();
  /// Two words, the first as the high half (CPUGeneratorImpl::random64).
  std::uint64_t next_u64();
  /// Lockstep's own transformations (not PyTorch's; those are in src/ops/torch_random.cpp):
  /// a uniform float in [0, 1) with 24 random bits (the high bits of next_u32),
  float next_float();
  /// a uniform double in [0, 1) with 53 random bits,
  double next_double();
  /// a uniform integer in [0, n) without modulo bias (rejection sampling); n > 0.
  std::uint64_t next_below(std::uint64_t n);

  /// Box-Muller's second value kept for the next double / float normal draw (MT19937's
  /// next_double_normal_sample / next_float_normal_sample; unused by Philox).
  std::optional<double>& next_double_normal() { return normal_double_; }
  std::optional<float>& next_float_normal() { return normal_float_; }

  /// The whole state as bytes (torch.Generator.get_state): for MT19937 the 5056 bytes of
  /// torch.get_rng_state() (CPUGeneratorImplState, x86-64 layout), for Philox 24 bytes (a tag,
  /// the seed, the offset). src/core/generator_state.cpp.
  std::vector<std::uint8_t> get_state() const;
  /// Restores a state from get_state() or torch.get_rng_state() (taking that state's engine).
  /// ValueError for a size or content neither engine writes.
  void set_state(std::span<const std::uint8_t> state);

  /// The mutex that guards the default generator.
  std::mutex& mutex() { return mu_; }

  Generator(const Generator& o);
  Generator& operator=(const Generator& o);
  ~Generator();

 private:
  struct MT;  // src/core/mt19937.h, behind a pointer to keep this header small
  Engine engine_ = Engine::Philox;
  std::uint64_t seed_ = 0;
  std::uint64_t offset_ = 0;
  MT* mt_ = nullptr;  // MT19937 only
  std::optional<double> normal_double_;
  std::optional<float> normal_float_;
  std::mutex mu_;
};

/// The generator used when none is passed (torch.default_generator): the process-wide one, or on
/// a thread inside a DefaultGeneratorGuard the guard's generator. Draws through the ops lock its
/// mutex, so threads may share it (their interleaving then decides who gets which numbers).
/// The process-wide one starts as Philox with seed 0; `default_generator().set_engine(
/// Generator::Engine::MT19937)` gives it PyTorch's streams (the Python front does so).
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

/// Seeds the default generator (torch.manual_seed), keeping its engine.
void manual_seed(std::uint64_t seed);

}  // namespace lockstep
