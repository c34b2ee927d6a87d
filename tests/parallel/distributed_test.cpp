// DistributedDataParallel with ranks as threads of this process (the threads ProcessGroup): the
// same code runs under mpirun with the MPI backend (tests/mpi). Golden trajectories on 1-4 ranks
// with 1 or 2 local devices each; deterministic mode bit-identical to one process with one
// device; cases C02, C03, C05 (join), C06 (broadcast at construction), C07 (unused parameters),
// C08 (no_sync), C11 (NaN on one rank).
#include "lockstep/parallel/distributed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "support/golden.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using parallel::DistributedDataParallel;
using parallel::DistributedDataParallelOptions;

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct RankRun {
  std::vector<double> step_losses, val_losses;
  StateDict final_params;
  std::vector<std::vector<float>> params_after_step;
};

// Trains golden `g` on `world` ranks with `local` devices each; every global batch is cut across
// ranks with split_batch (whole shards in deterministic mode). Returns rank 0's record and each
// rank's parameters after every step.
std::vector<RankRun> train_ddp(const Golden& g, int world, int local, bool deterministic) {
  std::vector<RankRun> runs(static_cast<std::size_t>(world));
  run_ranks(world, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = build_mlp(g);
    DistributedDataParallelOptions o;
    o.device_ids = cpus(local);
    o.deterministic = deterministic;
    o.threads_per_device = 1;
    auto ddp = std::make_shared<DistributedDataParallel>(model, group, o);
    auto optimizer = build_optimizer(g, ddp->parameters());
    Tensor x_train = g.x.narrow(0, 0, g.n_train), y_train = g.y.narrow(0, 0, g.n_train);
    Tensor x_val = g.x.narrow(0, g.n_train, g.n_val), y_val = g.y.narrow(0, g.n_train, g.n_val);
    data::DataLoader loader(std::make_shared<data::TensorDataset>(x_train, y_train),
                            {.batch_size = g.batch_size});
    nn::CrossEntropyLoss criterion;
    RankRun& run = runs[static_cast<std::size_t>(rank)];
    for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch) {
      ddp->train();
      for (const auto& [bx, by] : loader) {
        auto parts = parallel::split_batch(bx.size(0), world, deterministic ? o.shard_size : 0);
        auto [start, size] = parts[static_cast<std::size_t>(rank)];
        optimizer->zero_grad();
        Tensor loss =
            ddp->forward_backward(bx.narrow(0, start, size), by.narrow(0, start, size), criterion);
        run.step_losses.push_back(loss.item());
        optimizer->step();
        run.params_after_step.push_back(flat_params(*ddp));
      }
      ddp->eval();
      no_grad guard;
      run.val_losses.push_back(criterion(ddp->forward(x_val), y_val).item());
    }
    run.final_params = ddp->state_dict();
  });
  return runs;
}

// One process, one device, deterministic: the reference the distributed runs must equal bit for
// bit.
StateDict train_single_deterministic(const Golden& g) {
  auto model = build_mlp(g);
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.threads_per_device = 1;
  nn::DataParallel dp(model, cpus(1), std::nullopt, o);
  auto optimizer = build_optimizer(g, dp.parameters());
  data::DataLoader loader(std::make_shared<data::TensorDataset>(g.x.narrow(0, 0, g.n_train),
                                                                g.y.narrow(0, 0, g.n_train)),
                          {.batch_size = g.batch_size});
  nn::CrossEntropyLoss criterion;
  for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch)
    for (const auto& [bx, by] : loader) {
      optimizer->zero_grad();
      dp.forward_backward(bx, by, criterion);
      optimizer->step();
    }
  return dp.state_dict();
}

class GoldenDistributed : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(GoldenDistributed, MatchesPyTorchAndRanksStayIdentical) {
  auto [name, world, local] = GetParam();
  Golden g = load_golden(name);
  auto runs = train_ddp(g, world, local, false);
  const RankRun& run = runs[0];
  EXPECT_TRUE(AllClose(run.step_losses, g.step_losses)) << "train_step_losses";
  EXPECT_TRUE(AllClose(run.val_losses, g.val_losses)) << "val_losses";
  for (const auto& [key, want] : g.final_params)
    EXPECT_TRUE(AllClose(run.final_params.at(key), want)) << key;
  for (int r = 1; r < world; ++r) {
    ASSERT_EQ(runs[static_cast<std::size_t>(r)].params_after_step.size(),
              run.params_after_step.size());
    for (std::size_t s = 0; s < run.params_after_step.size(); ++s)
      ASSERT_TRUE(bit_equal(runs[static_cast<std::size_t>(r)].params_after_step[s],
                            run.params_after_step[s]))
          << "rank " << r << " differs from rank 0 after step " << s;
    EXPECT_EQ(runs[static_cast<std::size_t>(r)].step_losses, run.step_losses)
        << "the returned loss is the same on every rank";
  }
}

TEST_P(GoldenDistributed, DeterministicIsBitIdenticalToOneProcess) {
  auto [name, world, local] = GetParam();
  Golden g = load_golden(name);
  StateDict single = train_single_deterministic(g);
  auto runs = train_ddp(g, world, local, true);
  for (int r = 0; r < world; ++r)
    for (const auto& [key, want] : single)
      EXPECT_TRUE(BitEqual(runs[static_cast<std::size_t>(r)].final_params.at(key), want))
          << key << " on rank " << r << " of " << world << " (" << local << " devices each)";
  for (const auto& [key, want] : g.final_params)
    EXPECT_TRUE(AllClose(runs[0].final_params.at(key), want)) << key << " vs PyTorch";
}

std::vector<std::tuple<std::string, int, int>> golden_params() {
  std::vector<std::tuple<std::string, int, int>> out;
  for (const auto& name : golden_names())
    for (int world : {1, 2, 3, 4})
      for (int local : {1, 2}) out.emplace_back(name, world, local);
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    All, GoldenDistributed, ::testing::ValuesIn(golden_params()),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int, int>>& info) {
      return std::get<0>(info.param) + "_ranks" + std::to_string(std::get<1>(info.param)) +
             "_local" + std::to_string(std::get<2>(info.param));
    });

// w·x per sample, one scalar parameter.
struct ScalarModel : nn::Cloneable<ScalarModel> {
  Tensor w;
  ScalarModel() { reset(); }
  void reset() override { w = register_parameter("w", ones({1})); }
  Tensor forward(const Tensor& x) override { return mul(x, w); }
};

Tensor column(std::vector<float> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return tensor(std::span<const float>(v), {n, 1});
}

TEST(DistributedCaseC02, UnevenRanksGiveTheGlobalMean) {
  // x = 1..13 on 2 ranks as 7 + 6 samples: the gradient is mean(x) = 7 exactly as one device
  // would compute it, not 7.25 (the mean of the two rank means).
  run_ranks(2, [](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = std::make_shared<ScalarModel>();
    DistributedDataParallel ddp(model, group);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    std::vector<float> x;
    for (int i = rank == 0 ? 1 : 8; i <= (rank == 0 ? 7 : 13); ++i) x.push_back(float(i));
    Tensor xs = column(x);
    ddp.forward_backward(xs, xs, [](const Tensor& out, const Tensor&) { return mean(out); });
    EXPECT_TRUE(allclose(model->w.grad().item(), 7.0)) << model->w.grad().item();
    opt.step();
    EXPECT_FLOAT_EQ(static_cast<float>(model->w.item()), 1.0f - 0.7f);
  });
}

TEST(DistributedCaseC03, MeanOfSquaresOnFourRanks) {
  run_ranks(4, [](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = std::make_shared<ScalarModel>();
    DistributedDataParallel ddp(model, group);
    optim::SGD opt(ddp.parameters(), {.lr = 0.01});
    Tensor x = column({float(2 * rank + 1), float(2 * rank + 2)});
    ddp.forward_backward(x, x,
                         [](const Tensor& out, const Tensor&) { return mean(mul(out, out)); });
    EXPECT_TRUE(allclose(model->w.grad().item(), 51.0)) << model->w.grad().item();
    opt.step();
    EXPECT_TRUE(allclose(model->w.item(), 0.49)) << model->w.item();
  });
}

TEST(DistributedCaseC06, RankZeroParametersAndBuffersWin) {
  std::vector<std::vector<float>> after_wrap(2), after_step(2), rank0_before(1);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    manual_seed(100 + static_cast<std::uint64_t>(rank));  // a different init on each rank
    auto model = std::make_shared<nn::Linear>(4, 2);
    if (rank == 0) rank0_before[0] = flat_params(*model);
    DistributedDataParallel ddp(model, group);
    after_wrap[static_cast<std::size_t>(rank)] = flat_params(ddp);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    manual_seed(7 + static_cast<std::uint64_t>(rank));
    Tensor x = randn({3, 4});
    ddp.forward_backward(x, x, [](const Tensor& out, const Tensor&) { return mean(out); });
    opt.step();
    after_step[static_cast<std::size_t>(rank)] = flat_params(ddp);
  });
  EXPECT_TRUE(bit_equal(after_wrap[0], rank0_before[0]));
  EXPECT_TRUE(bit_equal(after_wrap[1], rank0_before[0])) << "rank 1 kept its own init";
  EXPECT_TRUE(bit_equal(after_step[0], after_step[1]));
}

// fc1 used, fc2 never used in forward.
struct PartlyUsed : nn::Cloneable<PartlyUsed> {
  std::shared_ptr<nn::Linear> fc1, fc2;
  PartlyUsed() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 2));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(2, 2));
  }
  Tensor forward(const Tensor& x) override { return fc1->forward(x); }
};

TEST(DistributedCaseC07, UnusedParametersUntouchedAcrossRanks) {
  manual_seed(3);
  auto reference = std::make_shared<PartlyUsed>();
  Tensor fc2_w = reference->fc2->weight.clone();
  manual_seed(11);
  Tensor x = randn({4, 4});
  std::vector<std::vector<float>> fc1(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = std::static_pointer_cast<PartlyUsed>(reference->clone());
    DistributedDataParallel ddp(model, group);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      ddp.forward_backward(x.narrow(0, 2 * rank, 2), x.narrow(0, 2 * rank, 2),
                           [](const Tensor& out, const Tensor&) { return mean(mul(out, out)); });
      EXPECT_FALSE(model->fc2->weight.grad().defined());
      opt.step();
    }
    EXPECT_TRUE(BitEqual(model->fc2->weight, fc2_w)) << "rank " << rank;
    EXPECT_FALSE(opt.state_dict().contains("state.2.momentum_buffer"));
    fc1[static_cast<std::size_t>(rank)] = model->fc1->weight.to_vector<float>();
  });
  optim::SGD opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    Tensor out = reference->forward(x);
    mean(mul(out, out)).backward();
    opt.step();
  }
  EXPECT_TRUE(AllClose(as_double(fc1[0]), as_double(reference->fc1->weight.to_vector<float>())));
  EXPECT_TRUE(bit_equal(fc1[0], fc1[1]));
}

TEST(DistributedCaseC05, JoinEndsUnevenInputsWithIdenticalParameters) {
  // 5 samples, batch 1 per rank, unpadded shards: rank 0 gets 3 batches, rank 1 gets 2.
  manual_seed(5);
  Tensor data = randn({5, 4}), target = randn({5, 1});
  auto init = std::make_shared<nn::Linear>(4, 1);
  std::vector<std::vector<float>> final(2);
  std::vector<std::int64_t> steps(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = std::static_pointer_cast<nn::Linear>(init->clone());
    DistributedDataParallel ddp(model, group);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    nn::MSELoss mse;
    for (std::int64_t i = rank; i < 5; i += 2) {
      opt.zero_grad();
      ddp.forward_backward(data.narrow(0, i, 1), target.narrow(0, i, 1),
                           [&](const Tensor& out, const Tensor& y) { return mse(out, y); });
      opt.step();
    }
    ddp.join();
    final[static_cast<std::size_t>(rank)] = flat_params(ddp);
    steps[static_cast<std::size_t>(rank)] = static_cast<std::int64_t>(ddp.step_count());
  });
  EXPECT_TRUE(bit_equal(final[0], final[1]));
  EXPECT_EQ(steps[0], 3);
  EXPECT_EQ(steps[1], 3) << "the joined rank shadowed the third step";
  // The third step had rank 0's sample only: its parameters are those of the 1-device run on the
  // batches {0,1}, {2,3}, {4}.
  auto ref = std::static_pointer_cast<nn::Linear>(init->clone());
  optim::SGD opt(ref->parameters(), {.lr = 0.1});
  nn::MSELoss mse;
  for (auto [s, n] : std::vector<std::pair<int, int>>{{0, 2}, {2, 2}, {4, 1}}) {
    opt.zero_grad();
    mse(ref->forward(data.narrow(0, s, n)), target.narrow(0, s, n)).backward();
    opt.step();
  }
  EXPECT_TRUE(AllClose(as_double(final[0]), as_double(flat_params(*ref))));
}

TEST(DistributedCaseC08, NoSyncAccumulatesThenReducesOnce) {
  std::vector<double> grads(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = std::make_shared<ScalarModel>();
    DistributedDataParallel ddp(model, group);
    auto loss = [](const Tensor& out, const Tensor&) { return mean(out); };
    const float first = rank == 0 ? 1.0f : 2.0f, second = rank == 0 ? 3.0f : 5.0f;
    {
      auto guard = ddp.no_sync();
      ddp.forward_backward(column({first}), column({first}), loss);
      EXPECT_FALSE(model->w.grad().defined()) << "nothing reduced inside no_sync";
    }
    ddp.forward_backward(column({second}), column({second}), loss);
    grads[static_cast<std::size_t>(rank)] = model->w.grad().item();
  });
  EXPECT_EQ(grads[0], 5.5) << "(1+3+2+5)/2; 4.5/6.5: wrong micro-batch synced; 4/7: none";
  EXPECT_EQ(grads[1], 5.5);
}

TEST(DistributedCaseC11, NaNOnOneRankIsSeenByEveryRank) {
  std::vector<double> global(2);
  std::vector<std::vector<double>> shares(2);
  std::vector<std::vector<float>> after(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    manual_seed(21);
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(8, 8));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(8, 1));
    DistributedDataParallel ddp(model, group);
    optim::SGD opt(ddp.parameters(), {.lr = 0.01});
    nn::MSELoss mse;
    manual_seed(22 + static_cast<std::uint64_t>(rank));
    for (int step = 1; step <= 3; ++step) {
      Tensor x = randn({4, 8}), y = randn({4, 1});
      if (step == 3 && rank == 1) x = full({4, 8}, std::nan(""));
      opt.zero_grad();
      Tensor loss = ddp.forward_backward(
          x, y, [&](const Tensor& out, const Tensor& t) { return mse(out, t); });
      // The CLI's decision: the global loss is the same on every rank, so every rank skips (or
      // stops at) the same step.
      if (!std::isfinite(loss.item())) {
        global[static_cast<std::size_t>(rank)] = loss.item();
        shares[static_cast<std::size_t>(rank)] = ddp.rank_losses();
        break;
      }
      opt.step();
    }
    after[static_cast<std::size_t>(rank)] = flat_params(ddp);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(std::isnan(global[static_cast<std::size_t>(r)])) << "rank " << r;
    ASSERT_EQ(shares[static_cast<std::size_t>(r)].size(), 2u);
    EXPECT_TRUE(std::isfinite(shares[static_cast<std::size_t>(r)][0]));
    EXPECT_TRUE(std::isnan(shares[static_cast<std::size_t>(r)][1])) << "rank 1 is named";
  }
  EXPECT_TRUE(bit_equal(after[0], after[1])) << "neither rank stepped at step 3";
}

TEST(Distributed, AutogradPathAveragesRankGradients) {
  // forward + loss.backward(): PyTorch DDP's semantics, the mean over ranks of each rank's
  // gradient (ranks with 1 and 3 samples: (mean(x_0) + mean(x_1)) / 2).
  std::vector<double> grads(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = std::make_shared<ScalarModel>();
    DistributedDataParallel ddp(model, group);
    Tensor x = rank == 0 ? column({2}) : column({1, 2, 3});
    mean(ddp.forward(x)).backward();
    grads[static_cast<std::size_t>(rank)] = model->w.grad().item();
  });
  EXPECT_EQ(grads[0], 2.0);
  EXPECT_EQ(grads[1], 2.0);
}

TEST(Distributed, RanksDisagreeingOnNoSyncIsAnErrorOnEveryRank) {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto model = std::make_shared<ScalarModel>();
    DistributedDataParallel ddp(model, group);
    auto loss = [](const Tensor& out, const Tensor&) { return mean(out); };
    try {
      if (rank == 0) {
        auto guard = ddp.no_sync();
        ddp.forward_backward(column({1}), column({1}), loss);
      } else {
        ddp.forward_backward(column({1}), column({1}), loss);
      }
    } catch (const ValueError& e) {
      errors[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  for (auto& e : errors) {
    EXPECT_NE(e.find("no_sync"), std::string::npos) << e;
    EXPECT_NE(e.find("ranks 0 inside no_sync"), std::string::npos) << e;
  }
}

TEST(Distributed, Errors) {
  expect_error<ValueError>(
      [] { DistributedDataParallel(std::make_shared<nn::Linear>(2, 2), nullptr); },
      {"null process group"});
  auto group = dist::new_thread_group(1)[0];
  DistributedDataParallel ddp(std::make_shared<nn::Linear>(2, 2), group);
  expect_error<ValueError>([&] { ddp.clone(); }, {"cannot be cloned"});
  EXPECT_EQ(ddp.world_size(), 1);
  EXPECT_EQ(ddp.rank(), 0);
  EXPECT_EQ(ddp.name(), "DistributedDataParallel");
  EXPECT_TRUE(ddp.state_dict().contains("weight")) << "no module. prefix";
}

TEST(Distributed, DropoutMasksMatchOneProcess) {
  // Dropout keyed by the global row index: DDP on 2 or 3 ranks (1 or 2 devices each) trains the
  // model one process trains on the global batch — bit for bit in deterministic mode.
  manual_seed(31);
  auto init = std::make_shared<nn::Sequential>();
  init->push_back(std::make_shared<nn::Linear>(6, 8));
  init->push_back(std::make_shared<nn::ReLU>());
  init->push_back(std::make_shared<nn::Dropout>(0.5));
  init->push_back(std::make_shared<nn::Linear>(8, 2));
  Tensor x = randn({20, 6});
  Tensor y = randint(0, 2, {20}, kInt64);
  nn::CrossEntropyLoss criterion;
  for (bool deterministic : {true, false}) {
    auto single_model = std::static_pointer_cast<nn::Sequential>(init->clone());
    parallel::DataParallelOptions so;
    so.deterministic = deterministic;
    so.threads_per_device = 1;
    nn::DataParallel dp(single_model, cpus(1), std::nullopt, so);
    optim::SGD single_opt(dp.parameters(), {.lr = 0.1});
    for (int step = 0; step < 3; ++step) {
      single_opt.zero_grad();
      dp.forward_backward(x, y, criterion);
      single_opt.step();
    }
    const std::vector<float> want = flat_params(dp);
    for (int world : {2, 3})
      for (int local : {1, 2}) {
        std::vector<std::vector<float>> got(static_cast<std::size_t>(world));
        run_ranks(world, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
          DistributedDataParallelOptions o;
          o.deterministic = deterministic;
          o.device_ids = cpus(local);
          o.threads_per_device = 1;
          DistributedDataParallel ddp(init->clone(), group, o);
          optim::SGD opt(ddp.parameters(), {.lr = 0.1});
          auto [start, size] = parallel::split_batch(
              20, world, deterministic ? o.shard_size : 0)[static_cast<std::size_t>(rank)];
          for (int step = 0; step < 3; ++step) {
            opt.zero_grad();
            ddp.forward_backward(x.narrow(0, start, size), y.narrow(0, start, size), criterion);
            opt.step();
          }
          got[static_cast<std::size_t>(rank)] = flat_params(ddp);
        });
        const std::string what = std::string(deterministic ? "deterministic" : "default") + ", " +
                                 std::to_string(world) + " ranks x " + std::to_string(local) +
                                 " devices";
        if (deterministic)
          EXPECT_TRUE(bit_equal(got[0], want)) << what;
        else
          EXPECT_TRUE(AllClose(as_double(got[0]), as_double(want))) << what;
        for (auto& g : got) EXPECT_TRUE(bit_equal(g, got[0])) << what;
      }
  }
}

TEST(Distributed, DeterministicModeCountsTheGatheredBytes) {
  // 2 ranks, 16 samples each in shards of 8: each rank sends its 2 rows of the 5 parameters of
  // Linear(4, 1) to the other rank: 2 x 5 x 4 bytes.
  std::vector<std::int64_t> bytes(2);
  run_ranks(2, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    DistributedDataParallelOptions o;
    o.deterministic = true;
    DistributedDataParallel ddp(std::make_shared<nn::Linear>(4, 1), group, o);
    Tensor x = ones({16, 4});
    ddp.forward_backward(x, ones({16, 1}),
                         [](const Tensor& out, const Tensor&) { return mean(out); });
    bytes[static_cast<std::size_t>(rank)] = ddp.bytes_moved_last_step();
  });
  EXPECT_EQ(bytes, (std::vector<std::int64_t>{40, 40}));
}

TEST(EvaluateExact, TenRowsOnThreeRanksCountEachRowOnce) {
  Tensor x = arange(0.0, 10.0, 1.0, kFloat32).reshape({10, 1});
  std::vector<std::vector<double>> totals(3);
  std::vector<std::int64_t> rows_seen(3);
  run_ranks(3, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    totals[static_cast<std::size_t>(rank)] = parallel::evaluate_exact(
        group.get(), x, x,
        [&](const Tensor& xs, const Tensor&) {
          rows_seen[static_cast<std::size_t>(rank)] = xs.size(0);
          return std::vector<double>{sum(xs).item()};
        },
        1);
  });
  EXPECT_EQ(rows_seen, (std::vector<std::int64_t>{4, 3, 3}));
  for (auto& t : totals) EXPECT_EQ(t, (std::vector<double>{45.0, 10.0}));  // sum 0..9, 10 rows
  // 2 rows on 3 ranks: the third rank evaluates nothing and still takes part
  Tensor two = x.narrow(0, 0, 2);
  run_ranks(3, [&](int rank, std::shared_ptr<dist::ProcessGroup> group) {
    auto t = parallel::evaluate_exact(
        group.get(), two, two,
        [](const Tensor& xs, const Tensor&) { return std::vector<double>{sum(xs).item()}; }, 1);
    EXPECT_EQ(t, (std::vector<double>{1.0, 2.0})) << "rank " << rank;
  });
  expect_error<ShapeError>([&] { parallel::evaluate_exact(nullptr, x, two, {}, 1); },
                           {"same number of rows"});
  expect_error<ValueError>(
      [&] {
        parallel::evaluate_exact(
            nullptr, x, x, [](const Tensor&, const Tensor&) { return std::vector<double>{}; }, 1);
      },
      {"returned 0 sums, expected 1"});
}

TEST(SplitBatch, TensorSplitAndWholeShards) {
  using V = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(parallel::split_batch(9, 4), (V{{0, 3}, {3, 2}, {5, 2}, {7, 2}}));
  EXPECT_EQ(parallel::split_batch(2, 3), (V{{0, 1}, {1, 1}, {2, 0}}));
  EXPECT_EQ(parallel::split_batch(0, 2), (V{{0, 0}, {0, 0}}));
  // 23 samples in shards of 8 (8, 8, 7) over 2 ranks: shards {0,1} and {2}
  EXPECT_EQ(parallel::split_batch(23, 2, 8), (V{{0, 16}, {16, 7}}));
  EXPECT_EQ(parallel::split_batch(8, 3, 8), (V{{0, 8}, {8, 0}, {8, 0}}));
  expect_error<ValueError>([] { parallel::split_batch(4, 0); }, {"parts >= 1"});
  expect_error<ValueError>([] { parallel::split_batch(-1, 2); }, {"batch >= 0"});
}

}  // namespace
}  // namespace lockstep::testing
