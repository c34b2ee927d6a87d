// Generator::get_state / set_state: for MT19937 the bytes of torch.get_rng_state() (PyTorch's
// CPUGeneratorImplState, aten/src/ATen/CPUGeneratorImpl.cpp, as laid out on x86-64: 5056 bytes),
// so a state saved by torch restores here and back; for Philox a short record of our own.
#include <cstring>
#include <string>

#include "core/mt19937.h"
#include "lockstep/core/error.h"
#include "lockstep/core/generator.h"

namespace lockstep {

namespace {

// CPUGeneratorImplStateLegacy + the float cache (torch's struct, field for field).
struct TorchCpuState {
  std::uint64_t the_initial_seed;
  std::int32_t left;
  std::int32_t seeded;
  std::uint64_t next;
  std::uint64_t state[detail::MT19937::kN];  // 32-bit words widened to 64
  double normal_x, normal_y, normal_rho;
  std::int32_t normal_is_valid;
  float next_float_normal_sample;
  bool is_next_float_normal_sample_valid;
};
static_assert(sizeof(TorchCpuState) == 5056, "torch.get_rng_state() is 5056 bytes");

constexpr char kPhiloxTag[8] = {'L', 'S', 'P', 'H', 'I', 'L', 'O', 'X'};
constexpr std::size_t kPhiloxSize = 24;  // tag, seed, offset

}  // namespace

std::vector<std::uint8_t> Generator::get_state() const {
  if (engine_ == Engine::Philox) {
    std::vector<std::uint8_t> out(kPhiloxSize);
    std::memcpy(out.data(), kPhiloxTag, 8);
    std::memcpy(out.data() + 8, &seed_, 8);
    std::memcpy(out.data() + 16, &offset_, 8);
    return out;
  }
  TorchCpuState s{};
  s.the_initial_seed = seed_;
  s.left = mt_->left;
  s.seeded = 1;
  s.next = mt_->next;
  for (int i = 0; i < detail::MT19937::kN; ++i)
    s.state[i] = mt_->state[static_cast<std::size_t>(i)];
  s.normal_is_valid = normal_double_.has_value();
  s.normal_y = normal_double_.value_or(0.0);
  s.is_next_float_normal_sample_valid = normal_float_.has_value();
  s.next_float_normal_sample = normal_float_.value_or(0.0f);
  std::vector<std::uint8_t> out(sizeof s);
  std::memcpy(out.data(), &s, sizeof s);
  return out;
}

void Generator::set_state(std::span<const std::uint8_t> state) {
  if (state.size() == kPhiloxSize && std::memcmp(state.data(), kPhiloxTag, 8) == 0) {
    std::uint64_t seed = 0, offset = 0;
    std::memcpy(&seed, state.data() + 8, 8);
    std::memcpy(&offset, state.data() + 16, 8);
    engine_ = Engine::Philox;
    manual_seed(seed);
    offset_ = offset;
    return;
  }
  if (state.size() != sizeof(TorchCpuState))
    throw ValueError("Generator::set_state: expected " + std::to_string(sizeof(TorchCpuState)) +
                     " bytes (torch.get_rng_state) or " + std::to_string(kPhiloxSize) +
                     " (a Philox state), got " + std::to_string(state.size()));
  TorchCpuState s;
  std::memcpy(&s, state.data(), sizeof s);
  detail::MT19937 mt;
  for (int i = 0; i < detail::MT19937::kN; ++i)
    mt.state[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(s.state[i]);
  mt.left = s.left;
  mt.next = static_cast<std::uint32_t>(s.next);
  if (!s.seeded || !mt.valid()) throw ValueError("Generator::set_state: invalid mt19937 state");
  engine_ = Engine::MT19937;
  manual_seed(s.the_initial_seed);
  static_cast<detail::MT19937&>(*mt_) = mt;
  normal_double_ = s.normal_is_valid ? std::optional<double>(s.normal_y) : std::nullopt;
  normal_float_ = s.is_next_float_normal_sample_valid
                      ? std::optional<float>(s.next_float_normal_sample)
                      : std::nullopt;
}

}  // namespace lockstep
