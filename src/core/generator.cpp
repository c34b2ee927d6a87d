// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC 2011), the same constants as cuRAND and
// Random123.
#include "lockstep/core/generator.h"

namespace lockstep {

namespace {
constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
}  // namespace

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
    std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
    std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

void Generator::manual_seed(std::uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

std::uint32_t Generator::next_u32() {
  std::uint64_t block = offset_ >> 2;
  auto r = philox4x32({static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                       0u, 0u},
                      {static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32)});
  std::uint32_t v = r[offset_ & 3];
  ++offset_;
  return v;
}

std::uint64_t Generator::next_u64() {
  std::uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Generator::next_float() { return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f; }

double Generator::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

std::uint64_t Generator::next_below(std::uint64_t n) {
  // Rejection: accept values below the largest multiple of n.
  std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    std::uint64_t v = next_u64();
    if (v < limit) return v % n;
  }
}

namespace {
thread_local Generator* default_override = nullptr;
}  // namespace

Generator& default_generator() {
  static Generator g(0);
  return default_override ? *default_override : g;
}

DefaultGeneratorGuard::DefaultGeneratorGuard(Generator& g) : previous_(default_override) {
  default_override = &g;
}

DefaultGeneratorGuard::~DefaultGeneratorGuard() { default_override = previous_; }

void manual_seed(std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(default_generator().mutex());
  default_generator().manual_seed(seed);
}

}  // namespace lockstep
