// Buffers under DataParallel and DistributedDataParallel (ranks as threads), PyTorch's rules: a
// DataParallel's replica 0 updates the module's own buffers and replicas k > 0 start every step
// from the module's values (torch/nn/parallel/data_parallel.py); deterministic mode keeps the
// step's first shard's update; DDP's broadcast_buffers sends the lowest active rank's buffers
// before synchronizing steps with PyTorch's gate (distributed.h, "Buffers").
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "lockstep/io/safetensors.h"
#include "support/buffer_probe.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

using parallel::DataParallel;
using parallel::DataParallelOptions;

enum class Path { Reducer, Gather };

Tensor mean_loss(const Tensor& out, const Tensor& y) { return mse_loss(out, y); }

// Three steps on a batch of 7 rows through `path`.
void train_steps(DataParallel& dp, Path path, int steps, std::int64_t rows = 7) {
  Tensor x = randn({rows, 3}), y = randn({rows, 2});
  for (int t = 0; t < steps; ++t) {
    dp.zero_grad();
    if (path == Path::Reducer) {
      dp.forward_backward(x, y, mean_loss);
    } else {
      mse_loss(dp.forward(x), y).backward();
    }
  }
}

TEST(Buffers, DataParallelKeepsReplicaZerosUpdatesAndRefreshesTheOthers) {
  for (int n : {1, 2, 3})
    for (Path path : {Path::Reducer, Path::Gather}) {
      SCOPED_TRACE("devices " + std::to_string(n) +
                   (path == Path::Reducer ? " forward_backward" : " forward + backward"));
      auto probe = std::make_shared<BufferProbe>();
      DataParallel dp(probe, cpus(n));
      train_steps(dp, path, 3);
      // 7 rows on n devices: replica 0's chunk is split_sizes(7, n)[0] rows.
      const std::int64_t c0 = split_sizes(7, n)[0];
      EXPECT_EQ(probe_buffers(*probe), (std::vector<double>{3.0 * c0, 3.0 * c0, 1.5 * c0}));
      EXPECT_EQ(dp.state_dict().at("count").item(), 3.0 * c0);
      EXPECT_EQ(dp.state_dict().at("total").to_vector<double>(),
                (std::vector<double>{3.0 * c0, 1.5 * c0}));
      // Every replica started every step from the module's value before it.
      for (int k = 0; k < n; ++k)
        EXPECT_EQ(probe->seen_on(cpu(k)), (std::vector<std::int64_t>{0, c0, 2 * c0}))
            << "replica " << k;
      // Evaluation reads the module's buffers and updates nothing.
      dp.eval();
      NoGradGuard no_grad;
      dp.forward(randn({5, 3}));
      EXPECT_EQ(probe_buffers(*probe)[0], 3.0 * c0);
      EXPECT_EQ(probe->seen_on(cpu(0)).back(), 3 * c0);
    }
}

TEST(Buffers, DeterministicModeKeepsTheFirstShardsUpdateOnEveryDeviceCount) {
  for (int n : {1, 2, 3})
    for (Path path : {Path::Reducer, Path::Gather}) {
      SCOPED_TRACE("devices " + std::to_string(n));
      auto probe = std::make_shared<BufferProbe>();
      DataParallelOptions o;
      o.deterministic = true;
      o.shard_size = 2;  // 7 rows: shards of 2, 2, 2, 1
      DataParallel dp(probe, cpus(n), std::nullopt, o);
      train_steps(dp, path, 3);
      EXPECT_EQ(probe_buffers(*probe), (std::vector<double>{6, 6, 3}));
      // Every shard's forward found the step's starting value.
      std::vector<std::int64_t> all;
      for (int k = 0; k < n; ++k)
        for (auto c : probe->seen_on(cpu(k))) all.push_back(c);
      std::sort(all.begin(), all.end());
      EXPECT_EQ(all, (std::vector<std::int64_t>{0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4}));
    }
}

TEST(Buffers, ModuleBuffersReplacedAfterWrappingAreFollowed) {
  auto probe = std::make_shared<BufferProbe>();
  DataParallel dp(probe, cpus(2));
  train_steps(dp, Path::Reducer, 1);
  // load_state_dict copies into the buffers; set_data replaces their memory.
  StateDict sd = dp.state_dict();
  sd.insert("count", scalar_tensor(40, kInt64));
  dp.load_state_dict(sd);
  Tensor count = probe->count;
  count.set_data(scalar_tensor(100, kInt64));
  train_steps(dp, Path::Reducer, 1);
  EXPECT_EQ(probe_buffers(*probe)[0], 104.0);  // replica 0's chunk of 7 on 2 devices: 4 rows
  EXPECT_EQ(probe->seen_on(cpu(1)).back(), 100);
}

TEST(Buffers, ResumeThroughASafetensorsFileRestoresThem) {
  // Five steps straight versus two, a safetensors round trip into a new wrapper, three more.
  const auto path = std::filesystem::temp_directory_path() / "lockstep_buffers_resume.safetensors";
  auto straight = std::make_shared<BufferProbe>();
  DataParallel a(straight, cpus(2));
  train_steps(a, Path::Reducer, 5);
  {
    DataParallel b(std::make_shared<BufferProbe>(), cpus(2));
    train_steps(b, Path::Reducer, 2);
    safetensors::save_state_dict(b.state_dict(), path.string());
  }
  auto fresh = std::make_shared<BufferProbe>();
  DataParallel c(fresh, cpus(2));
  c.load_state_dict(safetensors::to_state_dict(safetensors::load_file(path.string())));
  EXPECT_EQ(probe_buffers(*fresh), (std::vector<double>{8, 8, 4}));
  train_steps(c, Path::Reducer, 3);
  std::filesystem::remove(path);
  EXPECT_EQ(probe_buffers(*fresh), probe_buffers(*straight));
  EXPECT_EQ(fresh->count.dtype(), kInt64);
}

TEST(Buffers, DistributedBroadcastFollowsPyTorchsGateOnThreadRanks) {
  for (int world : {2, 3})
    for (bool broadcast : {true, false}) {
      SCOPED_TRACE("world " + std::to_string(world) + (broadcast ? " broadcast" : " local"));
      run_ranks(world, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
        ddp_buffer_gate_body(rank, group, broadcast);
      });
    }
}

TEST(Buffers, DistributedJoinHandsTheLowestActiveRanksBuffersToEveryRank) {
  for (int world : {2, 3})
    for (int early : {0, world - 1}) {
      SCOPED_TRACE("world " + std::to_string(world) + ", rank " + std::to_string(early) +
                   " joins first");
      run_ranks(world, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
        ddp_buffer_join_body(rank, group, early);
      });
    }
}

TEST(Buffers, AChunkWhoseTargetsAreAllIgnoredStillRunsItsForward) {
  // As PyTorch: the forward (and so BatchNorm's statistics) does not depend on the loss's mask.
  for (bool deterministic : {false, true}) {
    auto probe = std::make_shared<BufferProbe>();
    DataParallelOptions o;
    o.deterministic = deterministic;
    DataParallel dp(probe, cpus(1), std::nullopt, o);
    Tensor y = full({4}, -100, kInt64);
    Tensor loss = dp.forward_backward(randn({4, 3}), y, nn::CrossEntropyLoss());
    EXPECT_TRUE(std::isnan(loss.item()));  // nothing counts: the mean over no terms
    EXPECT_EQ(probe_buffers(*probe)[0], 4.0) << "deterministic " << deterministic;
    for (auto& p : probe->parameters()) EXPECT_FALSE(p.grad().defined());
  }
}

TEST(Buffers, DistributedDeterministicRankWithoutRowsKeepsItsBuffers) {
  // A rank with no rows in a step, then join(): nothing to keep on it, no crash; at the end
  // every rank holds the active rank's buffers.
  run_ranks(2, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
    auto probe = std::make_shared<BufferProbe>();
    parallel::DistributedDataParallelOptions o;
    o.deterministic = true;
    o.shard_size = 2;
    parallel::DistributedDataParallel ddp(probe, group, o);
    const std::int64_t rows = rank == 0 ? 4 : 0;
    ddp.forward_backward(zeros({rows, 3}), zeros({rows, 2}), mean_loss);
    if (rank == 0) ddp.forward_backward(zeros({4, 3}), zeros({4, 2}), mean_loss);
    ddp.join();
    // Rank 0's first shard (2 rows) in each of its two steps.
    EXPECT_EQ(probe_buffers(*probe), (std::vector<double>{4, 4, 2})) << "rank " << rank;
  });
}

}  // namespace
}  // namespace lockstep::testing
