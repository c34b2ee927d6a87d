// Generator: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC 2011; the same constants as cuRAND
// and Random123) or PyTorch's mt19937 (src/core/mt19937.h), and the default generator.
#include "lockstep/core/generator.h"

#include <string>

#include "core/mt19937.h"
#include "lockstep/core/detail/philox.h"
#include "lockstep/core/error.h"

namespace lockstep {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  detail::philox4x32_10(c.data(), k[0], k[1]);  // include/lockstep/core/detail/philox.h, shared with the GPU
  return c;
}

Generator::Generator(std::uint64_t seed, Engine engine) : engine_(engine) { manual_seed(seed); }

Generator::Generator(const Generator& o)
    : engine_(o.engine_),
      seed_(o.seed_),
      offset_(o.offset_),
      mt_(o.mt_ ? new MT(*o.mt_) : nullptr),
      normal_double_(o.normal_double_),
      normal_float_(o.normal_float_) {}

Generator& Generator::operator=(const Generator& o) {
  if (this == &o) return *this;
  MT* copy = o.mt_ ? new MT(*o.mt_) : nullptr;
  delete mt_;
  mt_ = copy;
  engine_ = o.engine_;
  seed_ = o.seed_;
  offset_ = o.offset_;
  normal_double_ = o.normal_double_;
  normal_float_ = o.normal_float_;
  return *this;
}

Generator::~Generator() { delete mt_; }

void Generator::set_engine(Engine engine) {
  engine_ = engine;
  manual_seed(seed_);
}

void Generator::manual_seed(std::uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
  normal_double_.reset();
  normal_float_.reset();
  if (engine_ == Engine::MT19937) {
    if (!mt_) mt_ = new MT();
    mt_->seed(seed);
  } else {
    delete mt_;
    mt_ = nullptr;
  }
}

std::uint64_t Generator::offset() const {
  if (engine_ != Engine::Philox)
    throw ValueError("Generator::offset: the MT19937 generator has no offset (use get_state)");
  return offset_;
}

void Generator::set_offset(std::uint64_t offset) {
  if (engine_ != Engine::Philox)
    throw ValueError("Generator::set_offset: the MT19937 generator has no offset (use set_state)");
  offset_ = offset;
}

std::uint32_t Generator::next_u32() {
  if (mt_) return (*mt_)();
  const std::uint32_t v = detail::philox_stream_word(seed_, offset_);
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
