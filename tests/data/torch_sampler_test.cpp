// PyTorch's visiting orders after torch.manual_seed (tests/data/torch_rng/torch_rng.json,
// "orders"): DataLoader(shuffle=True and False) over two passes, RandomSampler, and
// DistributedSampler on every rank and two epochs, with the default generator MT19937; and
// what the passes consumed (the randint drawn afterwards agrees).
#include <gtest/gtest.h>

#include <numeric>

#include "lockstep/lockstep.h"
#include "support/torch_rng.h"

namespace lockstep {
namespace {

using testing::torch_rng;
using testing::torch_values;
using TorchOrder = testing::TorchStreams;

std::shared_ptr<data::TensorDataset> indices_dataset(std::int64_t n) {
  Tensor x = arange(n);
  return std::make_shared<data::TensorDataset>(x, x);
}

TEST_F(TorchOrder, DataLoaderAndRandomSamplerVisitTorchsOrder) {
  int checked = 0;
  for (const auto& e : torch_rng()["orders"]) {
    if (e["kind"] == "distributed_sampler") continue;
    SCOPED_TRACE(e.dump().substr(0, 80));
    const std::int64_t n = e["n"];
    manual_seed(e["seed"].get<std::uint64_t>());
    std::vector<std::vector<std::int64_t>> epochs;
    if (e["kind"] == "dataloader") {
      data::DataLoader loader(indices_dataset(n), {.batch_size = 4, .shuffle = e["shuffle"]});
      for (int pass = 0; pass < 2; ++pass) {
        std::vector<std::int64_t> seen;
        for (auto& [x, y] : loader)
          for (auto v : x.to_vector<std::int64_t>()) seen.push_back(v);
        epochs.push_back(seen);
      }
    } else {
      data::TorchRandomSampler sampler(n);
      for (int pass = 0; pass < 2; ++pass) epochs.push_back(sampler.indices(pass));
    }
    EXPECT_EQ(nlohmann::json(epochs), e["epochs"]);
    EXPECT_EQ(torch_values(randint(0, 1000, {3})), e["next_randint"]);
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

TEST_F(TorchOrder, DistributedSamplerGivesEveryRankTorchsIndices) {
  for (const auto& e : torch_rng()["orders"]) {
    if (e["kind"] != "distributed_sampler") continue;
    const std::int64_t replicas = e["num_replicas"];
    for (std::int64_t rank = 0; rank < replicas; ++rank) {
      data::DistributedSampler s(e["n"], replicas, rank, true, e["seed"], e["drop_last"]);
      for (int epoch = 0; epoch < 2; ++epoch) {
        s.set_epoch(epoch);
        EXPECT_EQ(nlohmann::json(s.indices()), e["ranks"][rank][epoch])
            << "rank " << rank << " epoch " << epoch << " n " << e["n"];
      }
    }
  }
}

TEST_F(TorchOrder, AnExplicitGeneratorIsUsedDirectly) {
  Generator g(11, Generator::Engine::MT19937);
  Generator h = g;
  data::TorchRandomSampler s(9, &g);
  // Each pass is randperm(9, g), then a second permutation that torch's loop draws and slices
  // empty (`randperm(n, generator)[:num_samples % n]`, torch/utils/data/sampler.py).
  const std::vector<std::int64_t> first = randperm(9, &h).to_vector<std::int64_t>();
  (void)randperm(9, &h);
  const std::vector<std::int64_t> second = randperm(9, &h).to_vector<std::int64_t>();
  (void)randperm(9, &h);
  EXPECT_EQ(s.indices(0), first);
  EXPECT_EQ(s.indices(1), second);
  EXPECT_EQ(randperm(9, &g).to_vector<std::int64_t>(), randperm(9, &h).to_vector<std::int64_t>());
}

TEST(PhiloxOrder, TheKeyedSamplersAreUnchangedByTheTorchOnes) {
  // With the default Philox engine the DataLoader's shuffle stays a pure function of
  // (seed, epoch), independent of the default generator's position.
  data::RandomSampler a(20, 3);
  manual_seed(0);
  auto first = a.indices(1);
  (void)randn({7});
  EXPECT_EQ(a.indices(1), first);
}

}  // namespace
}  // namespace lockstep
