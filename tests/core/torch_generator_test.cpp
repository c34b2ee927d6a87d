// The MT19937 engine (PyTorch's CPU generator) against torch's own values: every sampler, dtype
// and size class of tests/data/torch_rng/torch_rng.json bit for bit, the Box-Muller cache across
// draws, torch.get_rng_state()'s bytes, and the Philox engine left as it was.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/lockstep.h"
#include "support/torch_rng.h"

namespace lockstep {
namespace {

using testing::torch_rng;
using testing::torch_values;
using TorchGenerator = testing::TorchStreams;

Tensor draw(const nlohmann::json& e) {
  const std::string op = e["op"];
  const DType dtype = testing::torch_dtype(e["dtype"]);
  const std::int64_t size = e["size"];
  const auto& a = e["args"];
  TensorOptions opts(dtype);
  if (op == "randn") return randn({size}, opts);
  if (op == "rand") return rand({size}, opts);
  if (op == "randint")
    return randint(a[0].get<std::int64_t>(), a[1].get<std::int64_t>(), {size}, opts);
  if (op == "randperm") return randperm(size);
  if (op == "dropout") return dropout(ones({size}, opts), a[0].get<double>(), true);
  Tensor t = empty({size}, opts);
  if (op == "normal_") return normal_(t, a[0].get<double>(), a[1].get<double>());
  if (op == "uniform_") return uniform_(t, a[0].get<double>(), a[1].get<double>());
  if (op == "random_" && a.empty()) return random_(t);
  if (op == "random_") return random_(t, a[0].get<std::int64_t>(), a[1].get<std::int64_t>());
  if (op == "bernoulli_") return bernoulli_(t, a[0].get<double>());
  throw ValueError("unknown op " + op);
}

TEST_F(TorchGenerator, EverySamplerDtypeAndSizeMatchesTorchBitwise) {
  int checked = 0;
  for (const auto& e : torch_rng()["samplers"]) {
    manual_seed(e["seed"].get<std::uint64_t>());
    const Tensor t = draw(e);
    if (e.contains("fnv1a64"))
      EXPECT_EQ(testing::torch_fnv1a64(t), e["fnv1a64"].get<std::string>())
          << e["op"] << " " << e["dtype"] << " size " << e["size"] << " seed " << e["seed"];
    else
      EXPECT_EQ(torch_values(t), e["values"])
          << e["op"] << " " << e["dtype"] << " size " << e["size"] << " args " << e["args"]
          << " seed " << e["seed"];
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

TEST_F(TorchGenerator, ChainedDrawsKeepTheNormalCacheAndTheStateBytesAreTorchs) {
  const auto& chain = torch_rng()["chain"];
  manual_seed(chain["seed"].get<std::uint64_t>());
  for (const auto& step : chain["steps"]) EXPECT_EQ(torch_values(draw(step)), step["values"]);
  const std::string hex = chain["state"];
  std::vector<std::uint8_t> want(hex.size() / 2);
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  // torch leaves the dummy fields and padding zero; so do we.
  EXPECT_EQ(default_generator().get_state(), want);

  // torch.set_rng_state: restoring torch's bytes continues its stream (and its cache).
  Generator g(7);
  g.set_state(want);
  EXPECT_EQ(g.engine(), Generator::Engine::MT19937);
  Tensor a = randn({5}, kFloat64, &g);
  Tensor b = randn({5}, kFloat64);
  EXPECT_EQ(torch_values(a), torch_values(b));
}

TEST_F(TorchGenerator, ExplicitGeneratorsAndCopiesAreIndependentStreams) {
  Generator g(0, Generator::Engine::MT19937);
  manual_seed(0);
  Tensor a = rand({37}, kFloat32, &g);
  Generator copy = g;
  Tensor b = rand({37}, kFloat32);
  EXPECT_EQ(torch_values(a), torch_values(b));
  EXPECT_EQ(torch_values(rand({3}, kFloat32, &g)), torch_values(rand({3}, kFloat32, &copy)));
  EXPECT_THROW(g.offset(), ValueError);
  EXPECT_THROW(g.set_state(std::vector<std::uint8_t>(10)), ValueError);
}

TEST(PhiloxGenerator, StateRoundTripsAndTheStreamIsUnchanged) {
  Generator g(5);
  EXPECT_EQ(g.engine(), Generator::Engine::Philox);
  // The first words of Philox4x32-10 for seed 5 at counter 0 (as before the MT19937 engine).
  const auto block = philox4x32({0, 0, 0, 0}, {5, 0});
  EXPECT_EQ(g.next_u32(), block[0]);
  EXPECT_EQ(g.next_u32(), block[1]);
  auto state = g.get_state();
  EXPECT_EQ(state.size(), 24u);
  Generator h(99, Generator::Engine::MT19937);
  h.set_state(state);
  EXPECT_EQ(h.engine(), Generator::Engine::Philox);
  EXPECT_EQ(h.offset(), 2u);
  EXPECT_EQ(h.next_u32(), g.next_u32());
}

}  // namespace
}  // namespace lockstep
