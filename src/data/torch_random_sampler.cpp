// TorchRandomSampler: torch.utils.data.RandomSampler's order (torch/utils/data/sampler.py,
// RandomSampler.__iter__ without replacement and num_samples = n).
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/core/tensor.h"
#include "lockstep/data/sampler.h"
#include "lockstep/ops/random.h"

namespace lockstep::data {

TorchRandomSampler::TorchRandomSampler(std::int64_t n, Generator* generator)
    : n_(n), generator_(generator) {
  if (n < 0) throw ValueError("TorchRandomSampler: negative size " + std::to_string(n));
}

std::vector<std::int64_t> TorchRandomSampler::indices(std::int64_t) const {
  if (generator_) {
    // for _ in range(num_samples // n): yield from randperm(n, generator)
    // yield from randperm(n, generator)[:num_samples % n]   <- drawn too, and empty
    std::vector<std::int64_t> order = randperm(n_, generator_).to_vector<std::int64_t>();
    randperm(n_, generator_);
    return order;
  }
  // seed = int(torch.empty((), dtype=torch.int64).random_().item()); generator.manual_seed(seed)
  Tensor seed = empty({}, kInt64);
  random_(seed);
  Generator g(static_cast<std::uint64_t>(seed.data_ptr<std::int64_t>()[0]),
              Generator::Engine::MT19937);
  return randperm(n_, &g).to_vector<std::int64_t>();
}

}  // namespace lockstep::data
