// ZeroRedundancyOptimizer with ranks as threads of this process (the threads ProcessGroup; the
// same code runs over MPI in tests/mpi_cli/zero_mpi_test.cpp): in deterministic mode the weights
// and the gathered optimizer state are bit-identical to the unsharded optimizer's for SGD with
// momentum, Adam and AdamW (weight-decay groups) on 2 and 3 ranks and 2 ranks × 2 devices;
// allclose without; the state per rank is a shard; checkpoints move between world sizes and
// between ZeRO and the plain optimizer; the partition and the bad inputs.
#include <gtest/gtest.h>

#include <mutex>

#include "lockstep/parallel/distributed.h"
#include "lockstep/parallel/zero_redundancy_optimizer.h"
#include "support/helpers.h"
#include "support/trained_state.h"

namespace lockstep::testing {
namespace {

using parallel::ZeroRedundancyOptimizer;

// Linear(6, 16) - Tanh - Linear(16, 3), plus `unused` (never gets a gradient); fc1's bias is
// frozen (never gets one either).
struct Net : nn::Cloneable<Net> {
  std::shared_ptr<nn::Linear> fc1, unused, fc2;
  Net() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    unused = register_module("unused", std::make_shared<nn::Linear>(4, 4));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(tanh(fc1->forward(x))); }
};

std::shared_ptr<Net> make_net() {
  manual_seed(7);
  auto net = std::make_shared<Net>();
  net->fc1->bias.requires_grad_(false);
  return net;
}

enum class Kind { Sgd, Adam, AdamW };
const char* name(Kind k) { return k == Kind::Sgd ? "sgd" : k == Kind::Adam ? "adam" : "adamw"; }

// The run's parameter groups (AdamW: nanoGPT's weight-decay groups) and optimizer class.
std::vector<optim::ParamGroup> groups(Kind k, const nn::Module& m) {
  if (k == Kind::AdamW) return optim::weight_decay_groups(m, 0.1);
  return {{m.parameters(), std::nullopt}};
}
parallel::OptimizerFactory factory(Kind k) {
  if (k == Kind::Sgd)
    return parallel::optimizer_class(
        optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  if (k == Kind::Adam)
    return parallel::optimizer_class(optim::AdamOptions{.lr = 0.01, .weight_decay = 0.05});
  return parallel::optimizer_class(optim::AdamWOptions{.lr = 0.02, .beta2 = 0.95});
}

struct ZeroRun {
  Kind kind = Kind::Adam;
  int world = 1, local = 1;
  bool deterministic = true;
  bool zero = true;
  std::int64_t bucket_cap = 256;  // bytes: several buckets, chunks cutting through parameters
  bool scatter = false;           // the reducer reduce-scatters (ZeRO's phase 2)
  double clip = 0;                // > 0: clip_grad_norm_ before each step (ZeRO's with scatter)
  int first_step = 0, steps = 4;
  const StateDict* model = nullptr;      // start from these (a checkpoint)
  const StateDict* optimizer = nullptr;  // ... and this optimizer state
};

struct Ranks {
  std::vector<TrainedState> state;  // per rank (the optimizer's state_dict gathered)
  std::vector<std::int64_t> state_bytes;
  StateDict model;  // rank 0's
};

// Trains steps [first_step, first_step + steps) of 16 rows each through DDP (its rows of every
// batch: split_batch): zero_grad, forward_backward, clip (run.clip > 0), step, as the CLI does.
Ranks train(const ZeroRun& run) {
  manual_seed(11);
  const Tensor x = randn({16 * 8, 6}), y = randint(0, 3, {16 * 8});
  Ranks out;
  out.state.resize(static_cast<std::size_t>(run.world));
  out.state_bytes.resize(static_cast<std::size_t>(run.world));
  std::mutex seed_lock;  // manual_seed + construction: the default generator is shared
  run_ranks(run.world, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
    parallel::DistributedDataParallelOptions o;
    o.device_ids = cpus(run.local);
    o.deterministic = run.deterministic;
    o.shard_size = 2;
    o.threads_per_device = 1;
    o.reducer.bucket_cap_bytes = run.bucket_cap;
    o.reducer.scatter = run.scatter;
    std::shared_ptr<Net> net;
    {
      std::lock_guard<std::mutex> lock(seed_lock);
      net = make_net();
    }
    parallel::DistributedDataParallel ddp(net, group, o);
    std::shared_ptr<optim::Optimizer> opt;
    if (run.zero)
      opt = std::make_shared<ZeroRedundancyOptimizer>(groups(run.kind, *net), factory(run.kind),
                                                      group, parallel::zero_layout(ddp));
    else
      opt = factory(run.kind)(groups(run.kind, *net));
    if (run.model) ddp.load_state_dict(*run.model);
    if (run.optimizer) opt->load_state_dict(*run.optimizer);
    for (int s = run.first_step; s < run.first_step + run.steps; ++s) {
      const auto part = parallel::split_batch(16, run.world, run.deterministic ? o.shard_size : 0);
      const auto [start, size] = part[static_cast<std::size_t>(rank)];
      opt->zero_grad();
      opt->set_lr(opt->lr() * 0.9);  // a schedule: the shard's steps must follow it
      ddp.forward_backward(x.narrow(0, 16 * s + start, size), y.narrow(0, 16 * s + start, size),
                           nn::CrossEntropyLoss());
      if (run.clip > 0) {
        if (run.scatter)
          static_cast<ZeroRedundancyOptimizer&>(*opt).clip_grad_norm_(run.clip);
        else
          nn::utils::clip_grad_norm_(ddp.parameters(), run.clip);
      }
      opt->step();
    }
    out.state[static_cast<std::size_t>(rank)] = trained_state(*net, *opt);
    out.state_bytes[static_cast<std::size_t>(rank)] = opt->state_bytes();
    if (rank == 0) out.model = ddp.state_dict();
  });
  return out;
}

// Bits of every rank's parameters and gathered state against `want` (one rank's, unsharded).
void expect_ranks_equal(const Ranks& got, const TrainedState& want, const std::string& what) {
  for (std::size_t r = 0; r < got.state.size(); ++r) {
    TrainedState g = got.state[r], w = want;
    g.grads.assign(g.params.size(), Tensor());  // ZeRO leaves .grad as DDP reduced it
    w.grads.assign(w.params.size(), Tensor());
    expect_bit_equal(g, w, what + ", rank " + std::to_string(r));
  }
}

TEST(Zero, BitIdenticalToUnshardedInDeterministicMode) {
  for (Kind k : {Kind::Sgd, Kind::Adam, Kind::AdamW}) {
    const TrainedState want = train({.kind = k, .zero = false}).state[0];
    for (auto [world, local] : {std::pair{2, 1}, std::pair{3, 1}, std::pair{2, 2}})
      expect_ranks_equal(train({.kind = k, .world = world, .local = local}), want,
                         std::string(name(k)) + ", " + std::to_string(world) + " ranks x " +
                             std::to_string(local) + " devices");
  }
}

TEST(Zero, AllcloseToUnshardedWithoutDeterministicMode) {
  for (Kind k : {Kind::Sgd, Kind::AdamW}) {
    const TrainedState want = train({.kind = k, .deterministic = false, .zero = false}).state[0];
    const Ranks got = train({.kind = k, .world = 3, .deterministic = false});
    for (std::size_t r = 0; r < got.state.size(); ++r)
      for (std::size_t i = 0; i < want.params.size(); ++i)
        EXPECT_TRUE(AllClose(got.state[r].params[i], want.params[i], 1e-5, 1e-6))
            << name(k) << ", rank " << r << ", parameter " << i;
    // And the ranks agree bit for bit (each rank took the others' updated shards).
    for (std::size_t r = 1; r < got.state.size(); ++r)
      for (std::size_t i = 0; i < want.params.size(); ++i)
        EXPECT_TRUE(BitEqual(got.state[r].params[i], got.state[0].params[i]));
  }
}

TEST(Zero, ReduceScatteredGradientsGiveTheAllReducedBits) {
  for (Kind k : {Kind::Sgd, Kind::Adam, Kind::AdamW})
    for (int world : {2, 3}) {
      const std::string what = std::string(name(k)) + ", " + std::to_string(world) + " ranks";
      const Ranks all = train({.kind = k, .world = world, .deterministic = false});
      const Ranks scattered =
          train({.kind = k, .world = world, .deterministic = false, .scatter = true});
      for (int r = 0; r < world; ++r) {
        TrainedState a = all.state[static_cast<std::size_t>(r)];
        const TrainedState& s = scattered.state[static_cast<std::size_t>(r)];
        // Each rank's .grad holds the sums of its shard only: not the all-reduced gradient.
        bool grads_differ = false;
        for (std::size_t i = 0; i < a.grads.size(); ++i)
          grads_differ =
              grads_differ || (a.grads[i].defined() && !BitEqual(a.grads[i], s.grads[i]));
        EXPECT_TRUE(grads_differ) << what << ", rank " << r << ": no reduce-scatter happened";
        a.grads = s.grads;
        expect_bit_equal(s, a, what + ", rank " + std::to_string(r));
      }
    }
}

TEST(Zero, ClipsByTheNormOfTheShardsGradients) {
  // With reduce-scattered gradients the norm comes from the ranks' partial sums: allclose to
  // clip_grad_norm_ over the all-reduced gradient (the sums are added in another order).
  for (Kind k : {Kind::Sgd, Kind::Adam})
    for (int world : {2, 3}) {
      const std::string what = std::string(name(k)) + ", " + std::to_string(world) + " ranks";
      const ZeroRun all{.kind = k, .world = world, .deterministic = false, .clip = 0.05};
      ZeroRun scattered = all, unclipped = all;
      scattered.scatter = true;
      unclipped.clip = 0;
      const Ranks want = train(all), got = train(scattered), free = train(unclipped);
      bool clipped = false;
      for (std::size_t i = 0; i < want.state[0].params.size(); ++i) {
        clipped =
            clipped || !AllClose(free.state[0].params[i], want.state[0].params[i], 1e-4, 1e-5);
        for (int r = 0; r < world; ++r)
          EXPECT_TRUE(AllClose(got.state[static_cast<std::size_t>(r)].params[i],
                               want.state[0].params[i], 1e-5, 1e-6))
              << what << ", rank " << r << ", parameter " << i;
      }
      EXPECT_TRUE(clipped) << what << ": max_norm 0.05 clipped nothing";
    }
}

TEST(Zero, ReduceScatterNeedsRanksWithOneDeviceEach) {
  parallel::DataParallelOptions o;
  o.reducer.scatter = true;
  expect_error<ValueError>([&] { nn::DataParallel dp(make_net(), cpus(1), std::nullopt, o); },
                           {"reducer.scatter", "DistributedDataParallel"});
  const std::vector<std::shared_ptr<Net>> nets{make_net(), make_net()};  // one thread seeds
  run_ranks(2, [&nets](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
    const auto& net = nets[static_cast<std::size_t>(rank)];
    parallel::DistributedDataParallelOptions d;
    d.device_ids = cpus(2);
    d.reducer.scatter = true;
    expect_error<ValueError>([&] { parallel::DistributedDataParallel ddp(net, group, d); },
                             {"one device per rank, got 2"});
    d.device_ids = cpus(1);
    d.reducer.compression = dist::WireFormat::BFloat16;
    expect_error<ValueError>([&] { parallel::DistributedDataParallel ddp(net, group, d); },
                             {"does not take bfloat16 compression"});
  });
}

TEST(Zero, EachRankHoldsAShardOfTheState) {
  const Ranks plain = train({.kind = Kind::Adam, .zero = false, .steps = 1});
  for (int world : {2, 3}) {
    const Ranks zero = train({.kind = Kind::Adam, .world = world, .steps = 1});
    std::int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      const double share = static_cast<double>(zero.state_bytes[static_cast<std::size_t>(r)]) /
                           static_cast<double>(plain.state_bytes[0]);
      // ≈ 1/world: chunks are ⌈bucket/world⌉ elements, and each piece has its own step count.
      EXPECT_GT(share, 0.8 / world) << world << " ranks, rank " << r;
      EXPECT_LT(share, 1.25 / world) << world << " ranks, rank " << r;
      total += zero.state_bytes[static_cast<std::size_t>(r)];
    }
    EXPECT_GE(total, plain.state_bytes[0]);
    EXPECT_LT(total, plain.state_bytes[0] * 1.1);
  }
}

TEST(Zero, CheckpointsMoveBetweenWorldSizesAndThePlainOptimizer) {
  for (Kind k : {Kind::Sgd, Kind::AdamW}) {
    const TrainedState want = train({.kind = k, .zero = false}).state[0];
    // Two steps on 2 ranks with ZeRO: the state gathered is the same on both ranks.
    const Ranks first = train({.kind = k, .world = 2, .steps = 2});
    const Ranks plain_first = train({.kind = k, .zero = false, .steps = 2});
    EXPECT_EQ(first.state[0].state.keys(), plain_first.state[0].state.keys()) << name(k);
    // ... and resumed for the last two on 3 ranks, on 1 rank without ZeRO, and from the plain
    // optimizer's checkpoint on 3 ranks with ZeRO: the uninterrupted run's bits.
    for (const auto& [resume, from] : {std::pair{ZeroRun{.kind = k, .world = 3}, &first},
                                       std::pair{ZeroRun{.kind = k, .zero = false}, &first},
                                       std::pair{ZeroRun{.kind = k, .world = 3}, &plain_first}}) {
      ZeroRun r = resume;
      r.first_step = 2;
      r.steps = 2;
      r.model = &from->model;
      r.optimizer = &from->state.back().state;  // any rank's: all gathered alike
      expect_ranks_equal(train(r), want,
                         std::string(name(k)) + " resumed on " + std::to_string(r.world) +
                             " ranks, zero " + std::to_string(r.zero));
    }
  }
}

TEST(Zero, PartitionCutsEachBucketIntoEqualChunks) {
  // Parameters of 5 and 3 elements, one bucket of 8 on 3 ranks: chunks of 3, the last short.
  const auto p = parallel::partition_for_zero({5, 3}, {0, 5}, 8, {{0, 8}}, 3);
  EXPECT_EQ(p.shard_numel, 3);
  ASSERT_EQ(p.pieces.size(), 3U);
  auto is = [](const parallel::ZeroPiece& piece, std::size_t param, std::int64_t lo,
               std::int64_t hi, std::int64_t packed) {
    return piece.param == param && piece.lo == lo && piece.hi == hi && piece.packed == packed;
  };
  ASSERT_EQ(p.pieces[0].size(), 1U);
  EXPECT_TRUE(is(p.pieces[0][0], 0, 0, 3, 0));
  ASSERT_EQ(p.pieces[1].size(), 2U);
  EXPECT_TRUE(is(p.pieces[1][0], 0, 3, 5, 0));
  EXPECT_TRUE(is(p.pieces[1][1], 1, 0, 1, 2));
  ASSERT_EQ(p.pieces[2].size(), 1U);
  EXPECT_TRUE(is(p.pieces[2][0], 1, 1, 3, 0));
  // Two buckets, given in reduction order (the last parameter first): packed in that order.
  const auto q = parallel::partition_for_zero({5, 3}, {0, 5}, 8, {{5, 8}, {0, 5}}, 2);
  EXPECT_EQ(q.shard_numel, 2 + 3);
  ASSERT_EQ(q.pieces[1].size(), 2U);
  EXPECT_TRUE(is(q.pieces[1][0], 1, 2, 3, 0));
  EXPECT_TRUE(is(q.pieces[1][1], 0, 3, 5, 2));
}

TEST(Zero, RefusesBadInputs) {
  expect_error<ValueError>(
      [] {
        (void)parallel::partition_for_zero({5}, {0}, 5, {{0, 3}, {4, 5}}, 2);
      },
      {"do not tile", "[4, 5)"});
  expect_error<ValueError>(
      [] {
        (void)parallel::partition_for_zero({5}, {2}, 5, {{0, 5}}, 2);
      },
      {"parameter 0 at [2, 7)"});
  auto net = make_net();
  const auto group = dist::new_thread_group(1).front();
  expect_error<ValueError>(
      [&] { ZeroRedundancyOptimizer z(groups(Kind::Adam, *net), factory(Kind::Adam), nullptr); },
      {"null process group"});
  expect_error<ValueError>(
      [&] { ZeroRedundancyOptimizer z(groups(Kind::AdamW, *net), factory(Kind::Sgd), group); },
      {"SGD takes one parameter group", "group 0"});
  expect_error<ValueError>(
      [&] {
        ZeroRedundancyOptimizer z({{{net->fc1->weight}, std::nullopt}}, factory(Kind::Adam), group,
                                  {{net->fc2->weight}, {0}, 48, {{0, 48}}});
      },
      {"parameter 0 [16, 6] is not in the layout"});
  expect_error<DTypeError>(
      [&] {
        ZeroRedundancyOptimizer z({{{net->fc1->weight, zeros({2}, kFloat64)}, std::nullopt}},
                                  factory(Kind::Adam), group);
      },
      {"parameter 1 is float64"});
  // A bad state: refused as the plain optimizer refuses it, nothing changed.
  ZeroRedundancyOptimizer z(groups(Kind::Adam, *net), factory(Kind::Adam), group);
  StateDict bad;
  bad.insert("param_groups.0.lr", scalar_tensor(0.5, kFloat64));
  bad.insert("state.0.exp_avg", zeros({3}));
  expect_error<StateDictError>([&] { z.load_state_dict(bad); },
                               {"state.0.exp_avg", "does not match parameter shape [16, 6]"});
  EXPECT_DOUBLE_EQ(z.lr(), 0.01);
}

}  // namespace
}  // namespace lockstep::testing
