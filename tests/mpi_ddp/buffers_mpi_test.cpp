// DistributedDataParallel's buffers over the MPI backend, run by ctest under `mpirun -np 2` and
// `-np 3` (label mpi): the broadcast_buffers gate and join() with ranks as processes; the same
// bodies run with ranks as threads in tests/parallel/buffers_test.cpp. Also join() shadowing a
// module that runs collectives (tests/parallel/collective_join_test.cpp with threads).
#include <gtest/gtest.h>

#include "lockstep/dist/mpi.h"
#include "lockstep/parallel/distributed.h"
#include "support/buffer_probe.h"
#include "support/collective_probe.h"
#include "support/helpers.h"
#include "support/mpi_gtest_main.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  static auto group = dist::init_mpi({.timeout_seconds = 30});
  return group;
}

TEST(MpiBuffers, BroadcastFollowsPyTorchsGate) {
  for (bool broadcast : {true, false}) ddp_buffer_gate_body(world()->rank(), world(), broadcast);
}

TEST(MpiBuffers, JoinHandsTheLowestActiveRanksBuffersToEveryRank) {
  for (int early : {0, world()->size() - 1}) ddp_buffer_join_body(world()->rank(), world(), early);
}

// `v` of every rank, in rank order.
std::vector<std::vector<double>> gathered(const std::vector<double>& v) {
  auto g = world();
  std::vector<Tensor> all;
  for (int r = 0; r < g->size(); ++r)
    all.push_back(zeros({static_cast<std::int64_t>(v.size())}, kFloat64));
  g->all_gather(all, tensor(std::span<const double>(v)));
  std::vector<std::vector<double>> out;
  for (auto& t : all) out.push_back(t.to_vector<double>());
  return out;
}

TEST(MpiJoin, ShadowsAModuleThatRunsCollectives) {
  // The last rank has one batch, the others three (rank r's have 2 + r rows): it joins and
  // shadows the probe's forward and backward all-reduces on 0 rows. Within the group's timeout
  // every rank logs each of the 3 steps' collectives, with the same mean of the active ranks'
  // rows, and the parameters end bit-identical and equal to one process trained on each step's
  // batches of the active ranks.
  const int world_size = world()->size(), me = world()->rank();
  manual_seed(11);
  auto init = std::make_shared<CollectiveProbe>();  // the same on every rank
  std::vector<std::vector<std::pair<Tensor, Tensor>>> data(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r)
    for (int s = 0; s < (r == world_size - 1 ? 1 : 3); ++s)
      data[static_cast<std::size_t>(r)].emplace_back(randn({2 + r, 3}), randn({2 + r, 2}));
  const auto mse = [](const Tensor& out, const Tensor& y) { return mse_loss(out, y); };
  auto model = std::static_pointer_cast<CollectiveProbe>(init->clone());
  model->log = std::make_shared<std::vector<CollectiveProbe::Entry>>();
  parallel::DistributedDataParallelOptions o;
  o.threads_per_device = 1;
  parallel::DistributedDataParallel ddp(model, world(), o);
  optim::SGD sgd(ddp.parameters(), optim::SGDOptions{.lr = 0.1});
  for (const auto& [x, y] : data[static_cast<std::size_t>(me)]) {
    sgd.zero_grad();
    ddp.forward_backward(x, y, mse);
    sgd.step();
  }
  ddp.join();
  EXPECT_EQ(ddp.step_count(), 3u);
  std::vector<double> means;
  int backward = 0;
  for (const auto& e : *model->log) {
    EXPECT_EQ(e.rank, me);
    EXPECT_EQ(e.size, world_size);
    if (e.backward)
      ++backward;
    else
      means.push_back(e.value);
  }
  EXPECT_EQ(backward, 3);
  ASSERT_EQ(means.size(), 3u);
  std::vector<double> params;
  for (auto& p : model->parameters())
    for (float v : p.to_vector<float>()) params.push_back(v);
  const auto all_means = gathered(means), all_params = gathered(params);
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(all_means[static_cast<std::size_t>(r)], means) << "rank " << r;
    EXPECT_EQ(all_params[static_cast<std::size_t>(r)], params) << "rank " << r;
  }
  auto ref = std::static_pointer_cast<CollectiveProbe>(init->clone());
  ref->log = std::make_shared<std::vector<CollectiveProbe::Entry>>();
  parallel::DataParallel dp(ref, cpus(1));
  optim::SGD ref_sgd(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  for (std::size_t s = 0; s < 3; ++s) {
    std::vector<Tensor> xs, ys;
    for (const auto& batches : data)
      if (s < batches.size()) {
        xs.push_back(batches[s].first);
        ys.push_back(batches[s].second);
      }
    ref_sgd.zero_grad();
    dp.forward_backward(cat(xs, 0), cat(ys, 0), mse);
    ref_sgd.step();
  }
  std::vector<double> expected, ref_means;
  for (auto& p : ref->parameters())
    for (float v : p.to_vector<float>()) expected.push_back(v);
  for (const auto& e : *ref->log)
    if (!e.backward) ref_means.push_back(e.value);
  EXPECT_TRUE(AllClose(params, expected));
  EXPECT_TRUE(AllClose(means, ref_means));
}

}  // namespace
}  // namespace lockstep::testing

int main(int argc, char** argv) {
  return lockstep::testing::run_mpi_gtest(argc, argv, lockstep::testing::world());
}
