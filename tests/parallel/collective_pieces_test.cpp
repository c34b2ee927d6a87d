// A module that runs collectives (nn::Module::runs_collectives(), SyncBatchNorm's kind) meets its
// siblings in every step whatever its piece holds: a piece whose targets are all ignored still
// runs backward (zeros), a replica without rows runs on 0 rows, a replica that throws releases
// the others from the collective they wait in (also one that fails after its gradient reducer
// started a bucket's reduction: it waits for it before the abort is cleared); a rank in DDP's
// join() shadows the others' steps (collective_join_test.cpp). Each of these hung before.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "lockstep/parallel/distributed.h"
#include "support/collective_probe.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

constexpr float kIgnored = 1e9f;  // a target row the loss does not count

Tensor mse(const Tensor& out, const Tensor& y) { return mse_loss(out, y); }

// The rows whose first target is not kIgnored (a piece is either all counted or all ignored
// here, so the loss of a counted piece is its plain MSE).
std::int64_t counted(const Tensor& y) {
  std::int64_t n = 0;
  const auto v = y.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); i += 2) n += v[i] != kIgnored;
  return n;
}

// Two SGD steps on `rows` rows whose rows [ignored_from, ignored_to) are ignored.
struct Trained {
  std::vector<float> params;
  std::vector<CollectiveProbe::Entry> log;
};
Trained train(int devices, std::int64_t rows, std::int64_t ignored_from, std::int64_t ignored_to,
              parallel::DataParallelOptions o, bool gather = false) {
  manual_seed(4);
  auto probe = std::make_shared<CollectiveProbe>();
  parallel::DataParallel dp(probe, cpus(devices), std::nullopt, o);
  optim::SGD sgd(dp.parameters(), optim::SGDOptions{.lr = 0.1});
  manual_seed(6);
  Tensor x = randn({rows, 3}), y = randn({rows, 2});
  if (ignored_to > ignored_from)
    narrow(y, 0, ignored_from, ignored_to - ignored_from).fill_(kIgnored);
  for (int step = 0; step < 2; ++step) {
    sgd.zero_grad();
    if (gather)
      mse(dp.forward(x), y).backward();
    else
      dp.forward_backward(x, y, mse, counted);
    sgd.step();
  }
  return {flat_params(*probe), *probe->log};
}

parallel::DataParallelOptions deterministic() {
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.shard_size = 2;
  return o;
}

TEST(CollectivePieces, IgnoredPieceStillMeetsTheBackwardCollectives) {
  // Deterministic mode: 8 rows in shards of 2, shard 2 all ignored; 1, 2 and 3 devices agree.
  const Trained one = train(1, 8, 4, 6, deterministic());
  EXPECT_EQ(probe_calls(one.log, 4), std::vector<std::vector<int>>(2, std::vector<int>(4, 2)));
  for (int devices : {2, 3}) {
    SCOPED_TRACE("devices " + std::to_string(devices));
    const Trained many = train(devices, 8, 4, 6, deterministic());
    EXPECT_EQ(probe_calls(many.log, 4), std::vector<std::vector<int>>(2, std::vector<int>(4, 2)));
    EXPECT_EQ(many.params, one.params);
  }
  // The reducer path: replica 1's chunk (rows 2-3) all ignored; the step equals replica 0's
  // chunk alone on one device (its gradient is the whole step's).
  const Trained two = train(2, 4, 2, 4, {});
  EXPECT_EQ(probe_calls(two.log, 2), std::vector<std::vector<int>>(2, std::vector<int>(2, 2)));
  for (float v : two.params) EXPECT_TRUE(std::isfinite(v));
}

TEST(CollectivePieces, ReplicasWithoutRowsRunOnZeroRows) {
  // 2 rows on 3 devices: replica 2 has none but still meets the collectives, over
  // forward_backward and the gather path; the parameters equal one device's (allclose).
  for (bool gather : {false, true}) {
    SCOPED_TRACE(gather ? "gather path" : "forward_backward");
    const Trained one = train(1, 2, 0, 0, {}, gather);
    const Trained three = train(3, 2, 0, 0, {}, gather);
    EXPECT_EQ(probe_calls(three.log, 3), std::vector<std::vector<int>>(2, std::vector<int>(3, 2)));
    ASSERT_EQ(three.params.size(), one.params.size());
    for (std::size_t i = 0; i < one.params.size(); ++i)
      EXPECT_NEAR(three.params[i], one.params[i], 1e-6f) << i;
  }
}

TEST(CollectivePieces, FailingReplicaReleasesTheOthers) {
  // Replica 1's loss throws after the forward's collective, while replica 0 waits in the
  // backward's: the step throws (naming the failure) instead of hanging, changes nothing, and
  // the next step runs.
  for (bool det : {false, true}) {
    SCOPED_TRACE(det ? "deterministic" : "reducer path");
    auto probe = std::make_shared<CollectiveProbe>();
    parallel::DataParallel dp(probe, cpus(2), std::nullopt,
                              det ? deterministic() : parallel::DataParallelOptions{});
    const std::vector<float> before = flat_params(*probe);
    Tensor x = randn({4, 3}), y = randn({4, 2});
    narrow(y, 0, 2, 2).fill_(-7.0f);
    const parallel::LossFn picky = [](const Tensor& out, const Tensor& t) {
      if (t.to_vector<float>()[0] == -7.0f) throw ValueError("bad label -7");
      return mse_loss(out, t);
    };
    expect_error<Error>([&] { dp.forward_backward(x, y, picky); }, {"bad label -7"});
    EXPECT_EQ(flat_params(*probe), before);
    for (auto& p : probe->parameters()) EXPECT_FALSE(p.grad().defined());
    Tensor loss = dp.forward_backward(x, randn({4, 2}), mse);
    EXPECT_TRUE(std::isfinite(loss.item()));
  }
}

TEST(CollectivePieces, AReplicaFailingAfterStartingABucketStillReleasesEveryone) {
  // 8-byte buckets: fc's bias (produced first by backward) is bucket 0, started from the hook;
  // then replica 1's hook on fc's weight throws, so replica 1 aborts the group with bucket 0
  // started (GradientReducer::discard waits for it there) and replica 0 waits in bucket 1's
  // reduction until the abort releases it. Several rounds: the next step must run each time.
  std::atomic<bool> fail{false};
  manual_seed(4);
  auto probe = std::make_shared<CollectiveProbe>();
  parallel::DataParallelOptions o;
  o.reducer.bucket_cap_bytes = 8;
  parallel::DataParallel dp(probe, cpus(2), std::nullopt, o);
  dp.replica(1)->parameters()[0].register_post_accumulate_grad_hook([&fail](Tensor&) {
    if (fail.exchange(false)) throw ShapeError("injected failure");
  });
  const std::vector<float> before = flat_params(*probe);
  for (int round = 0; round < 10; ++round) {
    fail = true;
    expect_error<Error>(
        [&] {
          dp.forward_backward(randn({4, 3}), randn({4, 2}), mse);
        },
        {"injected failure"});
    EXPECT_EQ(flat_params(*probe), before) << "round " << round;
    Tensor loss = dp.forward_backward(randn({4, 3}), randn({4, 2}), mse);
    EXPECT_TRUE(std::isfinite(loss.item())) << "round " << round;
  }
}

}  // namespace
}  // namespace lockstep::testing
