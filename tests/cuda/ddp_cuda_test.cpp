// DistributedDataParallel on GPUs (one process per GPU over an NCCL group whose CPU-tensor
// collectives go to its bootstrap group; include/lockstep/parallel/distributed.h, dist/nccl.h)
// and `lockstep train --backend nccl`.
//
// Without a GPU (these run in CI's CUDA stage): a null bootstrap is refused; the CLI refuses
// --backend nccl naming the missing GPU. With one GPU: the bootstrap dispatch (CPU collectives
// reach the bootstrap, CUDA ones do not, a collective mixing the two is refused); DDP of size 1
// over NCCL (bootstrap: a threads group of one) reproduces every golden trajectory on cuda:0
// through both training paths, bit-identical twice; the refusals that need an NCCL group; the CLI
// with --backend nccl alone equals --devices cuda:0, and refuses more ranks than GPUs. With two
// or more GPUs: two thread ranks, each on its own GPU, reproduce the golden trajectories and stay
// bit-identical to each other. Deterministic mode: one rank on cuda:0, and two thread ranks on two
// GPUs, bit-identical to DataParallel's deterministic mode on cuda:0; the CLI's --deterministic on
// a GPU the same weights twice, through --backend nccl and on two GPUs. Each test that needs a
// GPU (or two) skips with the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "e2e/cli_support.h"
#include "lockstep/lockstep.h"
#include "support/golden.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

using e2e::operator+;

Device gpu(int k) { return Device(DeviceType::CUDA, k); }

// A CPU group that counts the collectives it is handed (a bootstrap whose use is observable).
class CountingGroup : public dist::ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<dist::ProcessGroup> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return "counting"; }
  void all_reduce(Tensor& t, dist::ReduceOp op) override {
    ++calls;
    inner_->all_reduce(t, op);
  }
  void reduce(Tensor& t, int dst, dist::ReduceOp op) override {
    ++calls;
    inner_->reduce(t, dst, op);
  }
  void broadcast(Tensor& t, int root) override {
    ++calls;
    inner_->broadcast(t, root);
  }
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    ++calls;
    inner_->all_gather(outputs, input);
  }
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                      dist::ReduceOp op) override {
    ++calls;
    inner_->reduce_scatter(output, inputs, op);
  }
  void barrier() override {
    ++calls;
    inner_->barrier();
  }
  int calls = 0;

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
};

// ---- without a GPU -----------------------------------------------------------------------------

TEST(NcclBootstrap, NullBootstrapIsRefused) {
  expect_error<ValueError>([] { (void)dist::new_nccl_group(nullptr, gpu(0)); }, {"null bootstrap"});
}

TEST(DdpCudaCli, BackendNcclWithoutAGpuIsAUsageError) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present; this probes the no-GPU path";
  e2e::TempDir dir;
  e2e::expect_usage_error({"train", "--backend", "nccl", "--save", dir / "w"},
                          {"--backend nccl", "no usable GPU"});
  e2e::expect_usage_error({"eval", "--weights", dir / "missing", "--backend", "nccl"},
                          {"--backend nccl", "no usable GPU"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(DdpCudaCli, VersionListsTheNcclBackend) {
  e2e::RunResult r = e2e::lockstep({"--version"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("nccl (--backend nccl: one process per GPU"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not built: NCCL"), std::string::npos) << r.out;
}

// ---- the bootstrap dispatch (one GPU) ----------------------------------------------------------

TEST(NcclBootstrap, CpuCollectivesGoToTheBootstrapCudaOnesToNccl) {
  LOCKSTEP_REQUIRE_CUDA();
  auto counting = std::make_shared<CountingGroup>(dist::new_thread_group(1)[0]);
  auto g = dist::new_nccl_group(counting, gpu(0));
  EXPECT_EQ(g->backend(), "nccl");
  const std::optional<Device> on = dist::nccl_device(*g);
  ASSERT_TRUE(on.has_value());
  EXPECT_EQ(on->str(), "cuda:0");
  EXPECT_EQ(dist::nccl_bootstrap(*g), counting);
  EXPECT_EQ(dist::nccl_bootstrap(*dist::new_nccl_group({gpu(0)})[0]), nullptr);

  int before = counting->calls;
  Tensor i = tensor(std::span<const std::int64_t>(std::vector<std::int64_t>{7, -2}));
  g->all_reduce(i, dist::ReduceOp::Max);
  Tensor d = tensor(std::span<const double>(std::vector<double>{0.25, 4.0}));
  g->broadcast(d, 0);
  g->reduce(d, 0);
  std::vector<Tensor> outs{zeros({2}, kFloat64)};
  g->all_gather(outs, d);
  Tensor out = zeros({2}, kFloat64);
  g->reduce_scatter(out, {d});
  EXPECT_EQ(counting->calls - before, 5);
  EXPECT_EQ(i.to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, -2}));
  EXPECT_EQ(outs[0].to_vector<double>(), (std::vector<double>{0.25, 4.0}));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{0.25, 4.0}));

  // CUDA tensors stay on NCCL: the bootstrap sees nothing.
  before = counting->calls;
  Tensor c = tensor({1.f, 2.f}).to(gpu(0));
  g->all_reduce(c);
  g->broadcast(c, 0);
  std::vector<Tensor> couts{zeros({2}).to(gpu(0))};
  g->all_gather(couts, c);
  g->barrier();
  EXPECT_EQ(counting->calls, before);
  EXPECT_EQ(couts[0].to(cpu()).to_vector<float>(), (std::vector<float>{1.f, 2.f}));

  // One collective over both kinds of device: DeviceError naming the tensor and both devices,
  // and the group stays usable.
  std::vector<Tensor> mixed{zeros({2})};
  expect_error<DeviceError>([&] { g->all_gather(mixed, c); },
                            {"nccl all_gather", "outputs[0] is on cpu:0", "cuda:0", "bootstrap"});
  std::vector<Tensor> mixed2{zeros({2}).to(gpu(0))};
  expect_error<DeviceError>(
      [&] {
        g->all_gather(mixed2, tensor({1.f, 2.f}));
      },
      {"nccl all_gather", "cpu:0", "cuda:0"});
  EXPECT_EQ(counting->calls, before);
  g->all_reduce(c);
  EXPECT_EQ(c.to(cpu()).to_vector<float>(), (std::vector<float>{1.f, 2.f}));
}

// ---- DistributedDataParallel over NCCL ---------------------------------------------------------

enum class Path { Gather, Reducer };

// Rank `rank` of `world` trains golden `g` on cuda:`rank` through DDP over an NCCL group
// bootstrapped by `boot`; every global batch is split across ranks with split_batch (the gather
// path only with world 1: its gradient is the mean of the ranks' own mean-loss gradients).
// In deterministic mode the batch is split in whole shards (split_batch with the shard size).
GoldenRun train_ddp(const Golden& g, int world, int rank,
                    const std::shared_ptr<dist::ProcessGroup>& boot, Path path,
                    bool deterministic = false) {
  auto group = dist::new_nccl_group(boot, gpu(rank));
  parallel::DistributedDataParallelOptions o;
  o.device_ids = {gpu(rank)};
  o.deterministic = deterministic;
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(build_mlp(g), group, o);
  auto optimizer = build_optimizer(g, ddp->parameters());
  Tensor x_train = g.x.narrow(0, 0, g.n_train), y_train = g.y.narrow(0, 0, g.n_train);
  Tensor x_val = g.x.narrow(0, g.n_train, g.n_val), y_val = g.y.narrow(0, g.n_train, g.n_val);
  data::DataLoader loader(std::make_shared<data::TensorDataset>(x_train, y_train),
                          {.batch_size = g.batch_size});
  nn::CrossEntropyLoss criterion;
  GoldenRun run;
  for (std::int64_t epoch = 0; epoch < g.epochs; ++epoch) {
    ddp->train();
    for (const auto& [bx, by] : loader) {
      const auto [start, size] = parallel::split_batch(
          bx.size(0), world, deterministic ? o.shard_size : 0)[static_cast<std::size_t>(rank)];
      Tensor x = bx.narrow(0, start, size), y = by.narrow(0, start, size);
      optimizer->zero_grad();
      if (path == Path::Gather) {
        Tensor out = ddp->forward(x);
        Tensor loss = criterion(out, y.to(out.device()));
        run.step_losses.push_back(loss.item());
        loss.backward();
      } else {
        run.step_losses.push_back(ddp->forward_backward(x, y, criterion).item());
      }
      for (const Tensor& p : ddp->parameters())
        if (p.grad().defined()) {
          EXPECT_EQ(p.grad().device().str(), gpu(rank).str());
        }
      optimizer->step();
    }
    ddp->eval();
    no_grad guard;
    Tensor out = ddp->forward(x_val);
    run.val_losses.push_back(criterion(out, y_val.to(out.device())).item());
  }
  for (const auto& [name, value] : ddp->state_dict())
    run.final_params.insert(name, value.detach().to(cpu()).clone());
  return run;
}

// The golden files within the GPU tolerance |a − b| ≤ 1e-4 + 1e-4·|b|.
void expect_matches(const GoldenRun& run, const Golden& g, const std::string& what) {
  expect_golden(run, g, what, 1e-4, 1e-4);
}

// Size 1 (bootstrap: a threads group of one): every NCCL call still runs (all_reduce of each
// bucket, the broadcast of construction), every CPU exchange goes to the bootstrap.
TEST(DdpCuda, GoldenTrajectoriesOneRankOnCuda0) {
  LOCKSTEP_REQUIRE_CUDA();
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    for (Path path : {Path::Reducer, Path::Gather}) {
      const std::string what = name + (path == Path::Reducer ? " reducer" : " gather");
      auto counting = std::make_shared<CountingGroup>(dist::new_thread_group(1)[0]);
      const GoldenRun run = train_ddp(g, 1, 0, counting, path);
      expect_matches(run, g, what);
      EXPECT_GT(counting->calls, 2) << what << ": the step exchanges went to the bootstrap";
    }
  }
}

TEST(DdpCuda, RunsTwiceBitIdentical) {
  LOCKSTEP_REQUIRE_CUDA();
  const Golden g = load_golden(golden_names().front());
  const GoldenRun a = train_ddp(g, 1, 0, dist::new_thread_group(1)[0], Path::Reducer);
  const GoldenRun b = train_ddp(g, 1, 0, dist::new_thread_group(1)[0], Path::Reducer);
  expect_bit_identical(a, b, "two runs");
}

// Two thread ranks, each on its own GPU (one NCCL communicator per rank, ncclCommInitRank with
// the id sent over the threads group): the golden trajectory, and rank 1 bit-identical to rank 0.
TEST(DdpCuda, GoldenTrajectoriesTwoRanksOnTwoGpus) {
  LOCKSTEP_REQUIRE_CUDA();
  const int n = cuda::device_count();
  if (n < 2) GTEST_SKIP() << "needs two GPUs, this machine has " << n;
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    std::vector<GoldenRun> runs(2);
    const auto errors = run_thread_ranks(2, [&](int rank, const auto& boot) {
      runs[static_cast<std::size_t>(rank)] = train_ddp(g, 2, rank, boot, Path::Reducer);
    });
    for (int r = 0; r < 2; ++r)
      ASSERT_FALSE(errors[static_cast<std::size_t>(r)])
          << name << " rank " << r << ": "
          << exception_message(errors[static_cast<std::size_t>(r)]);
    expect_matches(runs[0], g, name + " on 2 GPUs");
    expect_bit_identical(runs[0], runs[1], name + " rank 1 vs rank 0");
  }
}

// ---- deterministic mode over NCCL ---------------------------------------------------------------

// DataParallel in deterministic mode on cuda:0 alone: the reference of the DDP runs below.
GoldenRun train_dp_deterministic(const Golden& g) {
  parallel::DataParallelOptions o;
  o.deterministic = true;
  return run_golden_data_parallel(g, {gpu(0)}, DataParallelPath::Reducer, o);
}

// One rank on cuda:0 (shard rows all_gathered over an NCCL group of one, the tree kernel on
// cuda:0): the golden files, and bit-identical to DataParallel's deterministic mode on cuda:0 —
// parameters, step losses (both the same tree of shard losses) and validation losses.
TEST(DdpCuda, DeterministicOneRankEqualsDataParallelOnCuda0) {
  LOCKSTEP_REQUIRE_CUDA();
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    const GoldenRun ddp =
        train_ddp(g, 1, 0, dist::new_thread_group(1)[0], Path::Reducer, /*deterministic=*/true);
    expect_matches(ddp, g, name + " deterministic DDP");
    expect_bit_identical(ddp, train_dp_deterministic(g), name + " DDP vs DataParallel");
  }
}

// Two thread ranks on two GPUs: each rank's shards' rows gathered over NCCL, the same tree on
// every rank: both ranks bit-identical to DataParallel's deterministic mode on cuda:0.
TEST(DdpCuda, DeterministicTwoRanksOnTwoGpusEqualDataParallelOnCuda0) {
  LOCKSTEP_REQUIRE_CUDA();
  const int n = cuda::device_count();
  if (n < 2) GTEST_SKIP() << "needs two GPUs, this machine has " << n;
  for (const std::string& name : golden_names()) {
    const Golden g = load_golden(name);
    std::vector<GoldenRun> runs(2);
    const auto errors = run_thread_ranks(2, [&](int rank, const auto& boot) {
      runs[static_cast<std::size_t>(rank)] =
          train_ddp(g, 2, rank, boot, Path::Reducer, /*deterministic=*/true);
    });
    for (int r = 0; r < 2; ++r)
      ASSERT_FALSE(errors[static_cast<std::size_t>(r)])
          << name << " rank " << r << ": "
          << exception_message(errors[static_cast<std::size_t>(r)]);
    const GoldenRun single = train_dp_deterministic(g);
    expect_bit_identical(runs[0], single, name + " rank 0 vs DataParallel on cuda:0");
    expect_bit_identical(runs[1], single, name + " rank 1 vs DataParallel on cuda:0");
  }
}

TEST(DdpCuda, RefusalsThatNeedAGpu) {
  LOCKSTEP_REQUIRE_CUDA();
  auto model = std::make_shared<nn::Linear>(3, 2);
  auto boot = dist::new_thread_group(1)[0];
  auto group = dist::new_nccl_group(boot, gpu(0));
  parallel::DistributedDataParallelOptions o;
  o.device_ids = {gpu(0)};
  // An NCCL group without a bootstrap cannot carry the step's CPU exchanges.
  auto no_boot = dist::new_nccl_group({gpu(0)})[0];
  expect_error<DeviceError>([&] { parallel::DistributedDataParallel ddp(model, no_boot, o); },
                            {"no bootstrap group", "new_nccl_group(bootstrap, cuda:0)"});
  // The group's GPU must be the one the module trains on.
  if (cuda::device_count() >= 2) {
    o.device_ids = {gpu(1)};
    expect_error<DeviceError>([&] { parallel::DistributedDataParallel ddp(model, group, o); },
                              {"NCCL process group is on cuda:0", "cuda:1"});
  }
}

// ---- the CLI with a GPU ------------------------------------------------------------------------

// Sets environment variables for the lifetime of the object (the CLI inherits them).
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& values) {
    for (const auto& [name, value] : values) {
      if (const char* old = std::getenv(name.c_str())) saved_[name] = old;
      ::setenv(name.c_str(), value.c_str(), 1);
    }
    for (const auto& [name, value] : values) names_.push_back(name);
  }
  ~ScopedEnv() {
    for (const auto& name : names_) ::unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::vector<std::string> names_;
  std::map<std::string, std::string> saved_;
};

// One process with --backend nccl (a job of one rank: DDP over NCCL on cuda:0) trains the same
// weights as one process with --devices cuda:0 (DataParallel over NCCL on cuda:0).
TEST(DdpCudaCli, BackendNcclAloneEqualsOneGpu) {
  LOCKSTEP_REQUIRE_CUDA();
  e2e::TempDir dir;
  const std::vector<std::string> common{"train", "--epochs", "2", "--quiet", "--seed", "5"};
  e2e::RunResult a =
      e2e::lockstep(common + std::vector<std::string>{"--backend", "nccl", "--save", dir / "a"});
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_NE(a.out.find("devices=cuda:0 world_size=1"), std::string::npos) << a.out;
  e2e::RunResult b =
      e2e::lockstep(common + std::vector<std::string>{"--devices", "cuda:0", "--save", dir / "b"});
  ASSERT_EQ(b.status, 0) << b.err;
  const StateDict wa = safetensors::to_state_dict(safetensors::load_file(dir / "a"));
  const StateDict wb = safetensors::to_state_dict(safetensors::load_file(dir / "b"));
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [key, t] : wb)
    EXPECT_TRUE(close(wa.at(key).to_vector<double>(), t.to_vector<double>(), 1e-6, 1e-6)) << key;
  // --devices naming another device than the rank's GPU is refused.
  e2e::expect_usage_error({"train", "--backend", "nccl", "--devices", "cpu:0"},
                          {"--devices cpu:0 with --backend nccl", "cuda:0"});
}

// The weights a run saved, bit for bit equal to another's (every tensor, same names).
void expect_same_weights(const std::string& a, const std::string& b, const std::string& what) {
  const StateDict wa = safetensors::to_state_dict(safetensors::load_file(a));
  const StateDict wb = safetensors::to_state_dict(safetensors::load_file(b));
  ASSERT_EQ(wa.size(), wb.size()) << what;
  for (const auto& [key, t] : wb) EXPECT_TRUE(BitEqual(wa.at(key), t)) << what << ": " << key;
}

// `--deterministic` on GPUs: --devices cuda:0 twice gives the same weights; --backend nccl (DDP,
// one rank on cuda:0) the same as --devices cuda:0; where there are two GPUs, --devices
// cuda:0,cuda:1 the same as cuda:0 alone.
TEST(DdpCudaCli, DeterministicOnGpusTrainsTheSameWeights) {
  LOCKSTEP_REQUIRE_CUDA();
  e2e::TempDir dir;
  const std::vector<std::string> common{"train", "--epochs",       "2", "--quiet", "--seed",
                                        "5",     "--deterministic"};
  auto train = [&](const std::vector<std::string>& extra, const std::string& save) {
    e2e::RunResult r = e2e::lockstep(common + extra + std::vector<std::string>{"--save", save});
    EXPECT_EQ(r.status, 0) << r.err;
    return r;
  };
  const std::string a = dir / "a", b = dir / "b", c = dir / "c", d = dir / "d";
  train({"--devices", "cuda:0"}, a);
  train({"--devices", "cuda:0"}, b);
  expect_same_weights(a, b, "--devices cuda:0 twice");
  const e2e::RunResult nccl = train({"--backend", "nccl"}, c);
  EXPECT_NE(nccl.out.find("devices=cuda:0 world_size=1"), std::string::npos) << nccl.out;
  expect_same_weights(c, a, "--backend nccl vs --devices cuda:0");
  if (cuda::device_count() >= 2) {
    train({"--devices", "cuda:0,cuda:1"}, d);
    expect_same_weights(d, a, "--devices cuda:0,cuda:1 vs cuda:0");
  }
}

// Under an MPI launcher with more ranks on the node than GPUs: refused before MPI starts, naming
// both counts (the launcher's environment is faked; nothing is launched).
TEST(DdpCudaCli, MoreRanksOnANodeThanGpusIsRefused) {
  LOCKSTEP_REQUIRE_CUDA();
  if (!dist::mpi_available()) GTEST_SKIP() << "this build has no MPI backend";
  const int gpus = cuda::device_count();
  const std::string ranks = std::to_string(gpus + 1);
  ScopedEnv env({{"OMPI_COMM_WORLD_SIZE", ranks},
                 {"OMPI_COMM_WORLD_RANK", std::to_string(gpus)},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(gpus)},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", ranks}});
  e2e::expect_usage_error(
      {"train", "--backend", "nccl", "--epochs", "1"},
      {"--backend nccl", ranks + " ranks on this node", "only " + std::to_string(gpus) + " GPU"});
}

}  // namespace
}  // namespace lockstep::testing
