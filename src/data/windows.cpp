// Random token windows (see lockstep/data/windows.h).
#include "lockstep/data/windows.h"

#include <string>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep::data {

std::pair<Tensor, Tensor> random_windows(const Tensor& tokens, std::int64_t block,
                                         std::int64_t batch, Generator& gen) {
  if (tokens.dtype() != DType::Int64 || tokens.dim() != 1)
    throw DTypeError("random_windows: tokens must be 1-d int64, got " + to_string(tokens.dtype()) +
                     " " + tokens.shape().str());
  if (block < 1 || batch < 1)
    throw ValueError("random_windows: block (" + std::to_string(block) + ") and batch (" +
                     std::to_string(batch) + ") must be at least 1");
  const std::int64_t n = tokens.numel();
  if (n < block + 1)
    throw ValueError("random_windows: " + std::to_string(n) +
                     " tokens hold no window of block + 1 = " + std::to_string(block + 1));
  const Tensor offsets = randint(0, n - block, {batch}, kInt64, &gen);
  const std::int64_t* t = tokens.data_ptr<std::int64_t>();
  const std::int64_t* ix = offsets.data_ptr<std::int64_t>();
  std::vector<std::int64_t> x(static_cast<std::size_t>(batch * block)), y(x.size());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < block; ++j) {
      x[static_cast<std::size_t>(b * block + j)] = t[ix[b] + j];
      y[static_cast<std::size_t>(b * block + j)] = t[ix[b] + j + 1];
    }
  return {tensor(std::span<const std::int64_t>(x), {batch, block}),
          tensor(std::span<const std::int64_t>(y), {batch, block})};
}

}  // namespace lockstep::data
