// DistributedDataParallel over the MPI backend, run by ctest under `mpirun -np 2` and
// `mpirun -np 4 --oversubscribe` (label mpi): parameters bit-identical on every rank after every
// step, deterministic mode bit-identical to one process with one device (goldens), and cases C05
// (uneven inputs, join), C06 (broadcast at construction), C08 (no_sync), C10 (one writer, load
// after a barrier) and C11 (NaN on one rank: every rank sees it at the same step); bf16 gradient
// compression equal to its emulation bit for bit, overlap on and off bit-identical. The same
// DistributedDataParallel code is tested with ranks as threads in tests/parallel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "lockstep/dist/mpi.h"
#include "lockstep/io/atomic_file.h"
#include "lockstep/io/safetensors.h"
#include "lockstep/parallel/distributed.h"
#include "support/golden.h"
#include "support/helpers.h"
#include "support/mpi_gtest_main.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using parallel::DistributedDataParallel;
using parallel::DistributedDataParallelOptions;

std::shared_ptr<dist::ProcessGroup> world() {
  static auto group = dist::init_mpi({.timeout_seconds = 30});
  return group;
}

std::vector<float> flat_params(const nn::Module& m) {
  std::vector<float> out;
  for (auto& [name, p] : m.named_parameters()) {
    auto v = p.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

/// Whether `v` is bit-identical on every rank (all_gather and compare with rank 0's).
bool same_on_all_ranks(const std::vector<float>& v) {
  auto g = world();
  Tensor mine = tensor(std::span<const float>(v));
  std::vector<Tensor> all;
  for (int r = 0; r < g->size(); ++r) all.push_back(zeros({static_cast<std::int64_t>(v.size())}));
  g->all_gather(all, mine);
  for (auto& t : all)
    if (std::memcmp(t.data_ptr<float>(), all[0].data_ptr<float>(), v.size() * sizeof(float)) != 0)
      return false;
  return true;
}

TEST(MpiDdp, GoldensBitIdenticalAcrossRanksEveryStepAndDeterministicEqualsOneProcess) {
  for (const std::string& name : golden_names()) {
    SCOPED_TRACE(name);
    Golden g = load_golden(name);
    for (bool deterministic : {false, true}) {
      auto model = build_mlp(g);
      DistributedDataParallelOptions o;
      o.deterministic = deterministic;
      o.threads_per_device = 1;
      DistributedDataParallel ddp(model, world(), o);
      auto optimizer = build_optimizer(g, ddp.parameters());
      data::DataLoader loader(std::make_shared<data::TensorDataset>(g.x.narrow(0, 0, g.n_train),
                                                                    g.y.narrow(0, 0, g.n_train)),
                              {.batch_size = g.batch_size});
      nn::CrossEntropyLoss criterion;
      std::vector<double> losses;
      for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch)
        for (const auto& [bx, by] : loader) {
          auto [start, size] = parallel::split_batch(
              bx.size(0), ddp.world_size(),
              deterministic ? o.shard_size : 0)[static_cast<std::size_t>(ddp.rank())];
          optimizer->zero_grad();
          losses.push_back(
              ddp.forward_backward(bx.narrow(0, start, size), by.narrow(0, start, size), criterion)
                  .item());
          optimizer->step();
          ASSERT_TRUE(same_on_all_ranks(flat_params(ddp)))
              << "ranks differ after step " << losses.size();
        }
      EXPECT_TRUE(AllClose(losses, g.step_losses));
      for (const auto& [key, want] : g.final_params)
        EXPECT_TRUE(AllClose(ddp.state_dict().at(key), want)) << key;
      if (!deterministic) continue;
      // one process, one device, deterministic: the same bits
      auto single_model = build_mlp(g);
      parallel::DataParallelOptions so;
      so.deterministic = true;
      so.threads_per_device = 1;
      nn::DataParallel dp(single_model, cpus(1), std::nullopt, so);
      auto single_opt = build_optimizer(g, dp.parameters());
      for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch)
        for (const auto& [bx, by] : loader) {
          single_opt->zero_grad();
          dp.forward_backward(bx, by, criterion);
          single_opt->step();
        }
      for (const auto& [key, want] : dp.state_dict())
        EXPECT_TRUE(BitEqual(ddp.state_dict().at(key), want)) << key;
    }
  }
}

TEST(MpiDdp, CaseC04DistributedSamplerShardsAcrossRealRanks) {
  // ids 0..7, one DistributedSampler per rank (shuffle, seed 0), epochs 0..2 with set_epoch:
  // each epoch the ranks' shards are disjoint, of 8 / R ids each, and cover 0..7; the order
  // changes between epochs.
  auto g = world();
  if (8 % g->size() != 0) GTEST_SKIP() << "C04 needs R dividing 8";
  data::DistributedSampler sampler(8, g->size(), g->rank(), /*shuffle=*/true, /*seed=*/0);
  std::vector<std::vector<std::int64_t>> orders;
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<std::int64_t> mine = sampler.indices();
    ASSERT_EQ(mine.size(), static_cast<std::size_t>(8 / g->size()));
    std::vector<Tensor> all;
    for (int r = 0; r < g->size(); ++r)
      all.push_back(zeros({static_cast<std::int64_t>(mine.size())}, kInt64));
    g->all_gather(all, tensor(std::span<const std::int64_t>(mine)));
    std::vector<std::int64_t> order;
    for (auto& t : all)
      for (auto v : t.to_vector<std::int64_t>()) order.push_back(v);
    std::vector<std::int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7})) << "epoch " << epoch;
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
}

TEST(MpiDdp, CaseC06RankZeroInitWins) {
  manual_seed(100 + static_cast<std::uint64_t>(world()->rank()));
  auto model = std::make_shared<nn::Linear>(4, 2);
  EXPECT_EQ(same_on_all_ranks(flat_params(*model)), world()->size() == 1);
  DistributedDataParallel ddp(model, world());
  EXPECT_TRUE(same_on_all_ranks(flat_params(ddp)));
  optim::SGD opt(ddp.parameters(), {.lr = 0.1});
  manual_seed(7 + static_cast<std::uint64_t>(world()->rank()));
  Tensor x = randn({3, 4});
  ddp.forward_backward(x, x, [](const Tensor& out, const Tensor&) { return mean(out); });
  opt.step();
  EXPECT_TRUE(same_on_all_ranks(flat_params(ddp)));
}

TEST(MpiDdp, CaseC05UnevenInputsJoin) {
  // 5 samples, batch 1 per rank, unpadded: rank r gets samples r, r + R, ...
  manual_seed(5);
  Tensor data = randn({5, 4}), target = randn({5, 1});
  auto model = std::make_shared<nn::Linear>(4, 1);
  DistributedDataParallel ddp(model, world());
  optim::SGD opt(ddp.parameters(), {.lr = 0.1});
  nn::MSELoss mse;
  for (std::int64_t i = world()->rank(); i < 5; i += world()->size()) {
    opt.zero_grad();
    ddp.forward_backward(data.narrow(0, i, 1), target.narrow(0, i, 1),
                         [&](const Tensor& out, const Tensor& y) { return mse(out, y); });
    opt.step();
  }
  ddp.join();
  EXPECT_TRUE(same_on_all_ranks(flat_params(ddp)));
  const std::int64_t R = world()->size();
  EXPECT_EQ(static_cast<std::int64_t>(ddp.step_count()), (5 + R - 1) / R);
}

// w·x per sample, one scalar parameter.
struct ScalarModel : nn::Cloneable<ScalarModel> {
  Tensor w;
  ScalarModel() { reset(); }
  void reset() override { w = register_parameter("w", ones({1})); }
  Tensor forward(const Tensor& x) override { return mul(x, w); }
};

TEST(MpiDdp, CaseC08NoSyncOnTheFirstMicroBatch) {
  if (world()->size() != 2) GTEST_SKIP() << "C08 is written for 2 ranks";
  auto model = std::make_shared<ScalarModel>();
  DistributedDataParallel ddp(model, world());
  auto loss = [](const Tensor& out, const Tensor&) { return mean(out); };
  const float first = ddp.rank() == 0 ? 1.0f : 2.0f, second = ddp.rank() == 0 ? 3.0f : 5.0f;
  {
    auto guard = ddp.no_sync();
    ddp.forward_backward(full({1, 1}, first), full({1, 1}, first), loss);
  }
  ddp.forward_backward(full({1, 1}, second), full({1, 1}, second), loss);
  EXPECT_EQ(model->w.grad().item(), 5.5) << "4.5/6.5: wrong micro-batch synced; 4/7: none";
}

TEST(MpiDdp, CaseC10OneWriterThenEveryRankLoads) {
  auto g = world();
  manual_seed(3);
  auto model = std::make_shared<nn::Linear>(4, 3);
  DistributedDataParallel ddp(model, g);
  optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    manual_seed(50 + static_cast<std::uint64_t>(step * 10 + g->rank()));
    Tensor x = randn({2, 4});
    opt.zero_grad();
    ddp.forward_backward(x, x,
                         [](const Tensor& out, const Tensor&) { return mean(mul(out, out)); });
    opt.step();
  }
  // a directory every rank agrees on: rank 0's pid, broadcast
  std::int64_t pid = ::getpid();
  Tensor p = tensor(std::span<const std::int64_t>(&pid, 1));
  g->broadcast(p, 0);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("lockstep_c10_" + std::to_string(p.to_vector<std::int64_t>()[0]));
  const std::string path = (dir / "step-2.safetensors").string();
  if (g->rank() == 0) {
    std::filesystem::create_directories(dir);
    StateDict all = ddp.state_dict();
    for (auto& [k, v] : opt.state_dict()) all.insert("optimizer." + k, v);
    safetensors::save_state_dict(all, path);  // atomic: temporary file, then rename
  }
  g->barrier();
  StateDict loaded = safetensors::to_state_dict(safetensors::load_file(path));
  std::vector<float> bits;
  for (auto& [k, v] : loaded) {
    auto f = v.to(kFloat32).to_vector<float>();
    bits.insert(bits.end(), f.begin(), f.end());
  }
  EXPECT_TRUE(same_on_all_ranks(bits));
  EXPECT_TRUE(BitEqual(loaded.at("weight"), model->weight));
  g->barrier();
  if (g->rank() == 0) {
    std::size_t files = 0;
    for (auto& e : std::filesystem::directory_iterator(dir)) {
      (void)e;
      ++files;
    }
    EXPECT_EQ(files, 1u) << "one file, no temporary left";
    std::filesystem::remove_all(dir);
  }
}

TEST(MpiDdp, CaseC11NaNOnOneRankIsACollectiveDecision) {
  auto g = world();
  if (g->size() < 2) GTEST_SKIP();
  manual_seed(21);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(8, 8));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(8, 1));
  DistributedDataParallel ddp(model, g);
  optim::SGD opt(ddp.parameters(), {.lr = 0.01});
  nn::MSELoss mse;
  manual_seed(22 + static_cast<std::uint64_t>(g->rank()));
  int stopped_at = 0;
  std::vector<float> after_step2;
  for (int step = 1; step <= 4; ++step) {
    Tensor x = randn({4, 8}), y = randn({4, 1});
    if (step == 3 && g->rank() == 1) x = full({4, 8}, std::nan(""));
    opt.zero_grad();
    Tensor loss =
        ddp.forward_backward(x, y, [&](const Tensor& out, const Tensor& t) { return mse(out, t); });
    if (!std::isfinite(loss.item())) {
      stopped_at = step;
      EXPECT_TRUE(std::isnan(ddp.rank_losses().at(1))) << "rank 1 is named";
      EXPECT_TRUE(std::isfinite(ddp.rank_losses().at(0)));
      break;
    }
    opt.step();
    if (step == 2) after_step2 = flat_params(ddp);
  }
  EXPECT_EQ(stopped_at, 3) << "on rank " << g->rank();
  EXPECT_TRUE(same_on_all_ranks(flat_params(ddp)));
  EXPECT_TRUE(flat_params(ddp) == after_step2) << "nobody stepped at step 3";
}

// Linear(6, 5) - Tanh - Linear(5, 3), the same on every rank (seeded).
std::shared_ptr<nn::Module> small_net() {
  manual_seed(9);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 5), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(5, 3)});
}

std::vector<float> flat_grads(const nn::Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters()) {
    auto v = p.grad().to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(MpiDdp, Bf16CompressionEqualsTheEmulationAndOverlapOnAndOffAreBitIdentical) {
  // Every rank trains 8 rows of its own, so its loss weight is 1/world (a power of two: exact).
  // The emulation: each rank's gradient (a plain backward on its rows, times 1/world) rounded to
  // bf16, summed in float32 in rank order, rounded again (process_group.h's BFloat16 wire).
  auto g = world();
  const int n = g->size();
  manual_seed(100 + static_cast<std::uint64_t>(g->rank()));
  const Tensor x = randn({8, 6}), y = randint(0, 3, {8});
  auto plain = small_net();
  nn::CrossEntropyLoss criterion;
  criterion(plain->forward(x), y).backward();
  const std::vector<float> mine = flat_grads(*plain);
  const auto numel = static_cast<std::int64_t>(mine.size());
  std::vector<Tensor> all;
  for (int r = 0; r < n; ++r) all.push_back(zeros({numel}));
  g->all_gather(all, tensor(std::span<const float>(mine)));
  std::vector<float> want(mine.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    float s = 0;
    for (int r = 0; r < n; ++r)
      s += round_to_bfloat16(all[static_cast<std::size_t>(r)].data_ptr<float>()[i] /
                             static_cast<float>(n));
    want[i] = round_to_bfloat16(s);
  }
  std::vector<std::vector<float>> got;
  for (bool overlap : {true, false}) {
    auto net = small_net();
    DistributedDataParallelOptions o;
    o.threads_per_device = 1;
    o.reducer = {
        .bucket_cap_bytes = 64, .overlap = overlap, .compression = dist::WireFormat::BFloat16};
    DistributedDataParallel ddp(net, g, o);
    ddp.forward_backward(x, y, criterion);
    got.push_back(flat_grads(*net));
  }
  ASSERT_EQ(got[0].size(), want.size());
  EXPECT_EQ(std::memcmp(got[0].data(), want.data(), want.size() * sizeof(float)), 0)
      << "bf16 compression differs from its emulation";
  EXPECT_EQ(std::memcmp(got[1].data(), got[0].data(), want.size() * sizeof(float)), 0)
      << "overlap on and off differ";
  EXPECT_TRUE(same_on_all_ranks(got[0]));
}

}  // namespace
}  // namespace lockstep::testing

int main(int argc, char** argv) {
  return lockstep::testing::run_mpi_gtest(argc, argv, lockstep::testing::world());
}
