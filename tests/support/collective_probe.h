// CollectiveProbe: a module whose forward and backward run collectives on
// dist::current_group() (a SyncBatchNorm in miniature), logging who took part; shared by the
// tests of deterministic mode's shard group and of the pieces every replica runs.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "lockstep/autograd/node.h"
#include "lockstep/dist/current_group.h"
#include "lockstep/lockstep.h"

namespace lockstep::testing {

// Linear(3, 2) whose training forward all-reduces (Σ x, rows) over current_group() and adds the
// global mean of x to its output (a SyncBatchNorm in miniature); its backward all-reduces the sum
// of the output gradient. Both results are logged with the member's rank and the group's size.
struct CollectiveProbe : nn::Cloneable<CollectiveProbe> {
  struct Entry {
    int rank, size;
    double value;  // forward: the global mean; backward: Σ over members of Σ grad
    bool backward;
  };
  std::shared_ptr<nn::Linear> fc;
  bool declares = true;
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<Entry>> log = std::make_shared<std::vector<Entry>>();

  CollectiveProbe() { reset(); }
  void reset() override { fc = register_module("fc", std::make_shared<nn::Linear>(3, 2)); }
  bool runs_collectives() const override { return declares; }
  std::string name() const override { return "CollectiveProbe"; }
  void note(Entry e) {
    std::lock_guard<std::mutex> lock(*mu);
    log->push_back(e);
  }
  Tensor forward(const Tensor& x) override {
    dist::ProcessGroup* g = dist::current_group();
    if (!g) throw Error("CollectiveProbe: no current group");
    double sums[2] = {sum(x.detach().to(kFloat64)).item(), static_cast<double>(x.size(0))};
    Tensor s = tensor(std::span<const double>(sums, 2));
    g->all_reduce(s, dist::ReduceOp::Sum);
    const auto v = s.to_vector<double>();
    const double mean = v[0] / v[1];
    note({g->rank(), g->size(), mean, false});
    Tensor out = add(fc->forward(x), scalar_tensor(mean, x.options()));
    if (!autograd::needs_grad({&out})) return out;
    Tensor y = out.detach();
    autograd::record("CollectiveProbeBackward", y, {&out}, [this, g](const Tensor& grad) {
      Tensor t = sum(grad.detach().to(kFloat64)).reshape({1});
      g->all_reduce(t, dist::ReduceOp::Sum);
      note({g->rank(), g->size(), t.item(), true});
      return std::vector<Tensor>{grad};
    });
    return y;
  }
};

// How many log entries of each kind ([0] forward, [1] backward) each member made, for a group
// of `size` (every entry must name that size).
inline std::vector<std::vector<int>> probe_calls(const std::vector<CollectiveProbe::Entry>& log,
                                                 int size) {
  std::vector<std::vector<int>> seen(2, std::vector<int>(static_cast<std::size_t>(size), 0));
  for (const auto& e : log) {
    EXPECT_EQ(e.size, size);
    if (e.rank >= 0 && e.rank < size) ++seen[e.backward ? 1 : 0][static_cast<std::size_t>(e.rank)];
  }
  return seen;
}

}  // namespace lockstep::testing
