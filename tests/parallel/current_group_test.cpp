// dist::current_group() inside a replica's forward: the group spans every replica of the step
// (DataParallel's devices; DDP's ranks × local devices, the HybridGroup), with this replica's
// rank, and its collectives — all_reduce, broadcast, all_gather, reduce_scatter — line up across
// replicas (what SyncBatchNorm needs).
#include <gtest/gtest.h>

#include <mutex>

#include "lockstep/dist/current_group.h"
#include "lockstep/lockstep.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

// Linear(2, 1) whose training forward runs the four collectives on dist::current_group() and
// records, per member rank, what it got.
struct GroupProbe : nn::Cloneable<GroupProbe> {
  struct Seen {
    int size = 0;
    double rows = 0;                 // all_reduce of the chunks' rows
    double root_value = 0;           // broadcast from the last member of its rank + 10
    std::vector<double> ranks;       // all_gather of the member ranks
    std::vector<double> scattered;   // reduce_scatter of [rank, 1]: [Σ ranks, size] per member
  };
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::map<int, Seen>> seen = std::make_shared<std::map<int, Seen>>();

  GroupProbe() { reset(); }
  void reset() override { fc = register_module("fc", std::make_shared<nn::Linear>(2, 1)); }
  Tensor forward(const Tensor& x) override {
    dist::ProcessGroup* g = dist::current_group();
    if (!g) throw Error("GroupProbe: no current group");
    NoGradGuard no_grad;
    const auto opts = TensorOptions().device(x.device());
    Seen s;
    s.size = g->size();
    Tensor rows = scalar_tensor(static_cast<double>(x.size(0)), opts).reshape({1});
    g->all_reduce(rows);
    s.rows = rows.item();
    Tensor v = scalar_tensor(g->rank() + 10.0, opts).reshape({1});
    g->broadcast(v, g->size() - 1);
    s.root_value = v.item();
    std::vector<Tensor> all;
    for (int m = 0; m < g->size(); ++m) all.push_back(zeros({1}, opts));
    g->all_gather(all, scalar_tensor(g->rank(), opts).reshape({1}));
    for (auto& t : all) s.ranks.push_back(t.item());
    std::vector<Tensor> parts;
    for (int m = 0; m < g->size(); ++m) {
      const double p[2] = {static_cast<double>(g->rank()), 1.0};
      parts.push_back(tensor(std::span<const double>(p, 2)).to(kFloat32).to(x.device()));
    }
    Tensor out = zeros({2}, opts);
    g->reduce_scatter(out, parts);
    s.scattered = out.to_vector<double>();
    {
      std::lock_guard<std::mutex> lock(*mu);
      (*seen)[g->rank()] = s;
    }
    EnableGradGuard grad;
    return fc->forward(x);
  }
  std::string name() const override { return "GroupProbe"; }
};

Tensor mean_loss(const Tensor& out, const Tensor& y) { return mse_loss(out, y); }

// What every member of a group of `size` should have seen for a step of `rows` rows.
void expect_members(const std::map<int, GroupProbe::Seen>& seen, int size, double rows) {
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(size));
  std::vector<double> ranks;
  for (int m = 0; m < size; ++m) ranks.push_back(m);
  const double sum = size * (size - 1) / 2.0;
  for (const auto& [rank, s] : seen) {
    SCOPED_TRACE("member " + std::to_string(rank));
    EXPECT_EQ(s.size, size);
    EXPECT_EQ(s.rows, rows);
    EXPECT_EQ(s.root_value, size - 1 + 10.0);
    EXPECT_EQ(s.ranks, ranks);
    EXPECT_EQ(s.scattered, (std::vector<double>{sum, static_cast<double>(size)}));
  }
}

TEST(CurrentGroup, IsNullOutsideAReplica) { EXPECT_EQ(dist::current_group(), nullptr); }

TEST(CurrentGroup, DataParallelReplicasAreTheRanksOfTheDevicesGroup) {
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE("devices " + std::to_string(n));
    auto probe = std::make_shared<GroupProbe>();
    parallel::DataParallel dp(probe, cpus(n));
    dp.forward_backward(randn({7, 2}), randn({7, 1}), mean_loss);
    expect_members(*probe->seen, n, 7);
    probe->seen->clear();
    mse_loss(dp.forward(randn({5, 2})), randn({5, 1})).backward();  // the gather path too
    expect_members(*probe->seen, n, 5);
    EXPECT_EQ(dist::current_group(), nullptr);
  }
}

TEST(CurrentGroup, DistributedReplicasAreRanksTimesLocalDevices) {
  for (int world : {1, 2, 3})
    for (int local : {1, 2}) {
      SCOPED_TRACE(std::to_string(world) + " ranks x " + std::to_string(local) + " devices");
      std::vector<std::map<int, GroupProbe::Seen>> seen(static_cast<std::size_t>(world));
      run_ranks(world, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& group) {
        auto probe = std::make_shared<GroupProbe>();
        parallel::DistributedDataParallelOptions o;
        o.device_ids = cpus(local);
        o.threads_per_device = 1;
        parallel::DistributedDataParallel ddp(probe, group, o);
        ddp.forward_backward(randn({3, 2}), randn({3, 1}), mean_loss);
        seen[static_cast<std::size_t>(rank)] = *probe->seen;
      });
      std::map<int, GroupProbe::Seen> all;
      for (int r = 0; r < world; ++r) {
        for (const auto& [m, s] : seen[static_cast<std::size_t>(r)]) {
          EXPECT_EQ(m / local, r) << "member " << m << " ran on rank " << r;
          all[m] = s;
        }
      }
      expect_members(all, world * local, 3.0 * world);
    }
}

}  // namespace
}  // namespace lockstep::testing
