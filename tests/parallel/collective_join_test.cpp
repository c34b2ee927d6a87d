// DistributedDataParallel::join() under a module that runs collectives in forward and backward
// (nn::Module::runs_collectives(), SyncBatchNorm's kind; CollectiveProbe here): a joined rank
// shadows the others' steps by running its replicas on 0 rows shaped like its last batch, so
// every collective meets all members and the result is that of the active ranks alone; where it
// cannot shadow (no batch trained, deterministic mode) every rank throws the same ValueError.
// Before, such a step was refused on every rank. The ranks are threads (the threads group); the
// MPI run is tests/mpi_ddp/buffers_mpi_test.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "lockstep/parallel/distributed.h"
#include "support/collective_probe.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

Tensor mse(const Tensor& out, const Tensor& y) { return mse_loss(out, y); }

using Body = std::function<void(int, const std::shared_ptr<dist::ProcessGroup>&)>;

// run_thread_ranks with a deadline: ranks still running after `seconds` hang (a failure); their
// groups are then aborted, so a rank waiting in a collective of theirs throws, and ranks still not
// back 10 s later end the binary (the hang must not outlive the test).
std::vector<std::exception_ptr> run_bounded(int size, const Body& body, int seconds = 60) {
  auto groups = dist::new_thread_group(size);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, groups[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    });
  const auto all_done = [&] { return done == size; };
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, std::chrono::seconds(seconds), all_done)) {
    ADD_FAILURE() << size - done << " of " << size << " ranks hung (still running after " << seconds
                  << " s)";
    for (auto& g : groups) g->abort("the test's deadline passed");
    if (!cv.wait_for(lock, std::chrono::seconds(10), all_done)) {
      std::fprintf(stderr, "collective_pieces_test: ranks still hung after the abort\n");
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  lock.unlock();
  for (auto& t : threads) t.join();
  return errors;
}

// Every rank threw the same ValueError, containing every string in `parts`.
void expect_same_value_error(const std::vector<std::exception_ptr>& errors,
                             const std::vector<std::string>& parts) {
  std::vector<std::string> msgs;
  for (std::size_t r = 0; r < errors.size(); ++r) {
    msgs.push_back(exception_message(errors[r]));
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not throw";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const ValueError&) {
    } catch (...) {
      ADD_FAILURE() << "rank " << r << " threw another type: " << msgs.back();
    }
    EXPECT_EQ(msgs.back(), msgs.front()) << "rank " << r;
    for (const auto& p : parts)
      EXPECT_NE(msgs.back().find(p), std::string::npos) << "'" << p << "' not in: " << msgs.back();
  }
}

// A CollectiveProbe plus a buffer its training forward updates from the local rows, so the ranks'
// buffers differ until DDP broadcasts them; clones share the probe's log.
struct BufferedProbe : nn::Cloneable<BufferedProbe> {
  std::shared_ptr<CollectiveProbe> probe;
  Tensor running;
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<CollectiveProbe::Entry>> log =
      std::make_shared<std::vector<CollectiveProbe::Entry>>();

  BufferedProbe() { reset(); }
  void reset() override {
    probe = register_module("probe", std::make_shared<CollectiveProbe>());
    probe->mu = mu;
    probe->log = log;
    running = register_buffer("running", zeros({1}));
  }
  std::string name() const override { return "BufferedProbe"; }
  Tensor forward(const Tensor& x) override {
    if (is_training()) {
      NoGradGuard no_grad;
      running.mul_(0.5).add_(sum(x.detach()).reshape({1}));
    }
    return probe->forward(x);
  }
};

// The forward entries' values (the global mean of the step's rows) of each member, in order.
std::vector<std::vector<double>> forward_means(const std::vector<CollectiveProbe::Entry>& log,
                                               int members) {
  std::vector<std::vector<double>> out(static_cast<std::size_t>(members));
  for (const auto& e : log)
    if (!e.backward && e.rank >= 0 && e.rank < members)
      out[static_cast<std::size_t>(e.rank)].push_back(e.value);
  return out;
}

TEST(CollectivePiecesJoin, JoinShadowsTheCollectivesOnZeroRows) {
  // Ranks with uneven numbers of batches (rank r's have 2 + r rows); the ranks that run out call
  // join() and shadow the others' steps. No rank hangs, every member takes part in each step's
  // forward and backward collective, and the parameters end bit-identical on all ranks and equal
  // to one process trained on the concatenation of each step's batches of the ranks still active:
  // a shadow step counts 0 rows, so the step's mean runs over the active ranks' rows alone.
  struct Case {
    int world, devices;
    std::vector<int> batches;
  };
  for (const Case& c : {Case{2, 1, {1, 3}}, Case{3, 2, {3, 1, 2}}}) {
    SCOPED_TRACE("world " + std::to_string(c.world) + ", devices " + std::to_string(c.devices));
    manual_seed(11);
    auto init = std::make_shared<BufferedProbe>();
    std::vector<std::vector<std::pair<Tensor, Tensor>>> data(static_cast<std::size_t>(c.world));
    for (int r = 0; r < c.world; ++r)
      for (int s = 0; s < c.batches[static_cast<std::size_t>(r)]; ++s)
        data[static_cast<std::size_t>(r)].emplace_back(randn({2 + r, 3}), randn({2 + r, 2}));
    const int steps = *std::max_element(c.batches.begin(), c.batches.end());
    struct Run {
      std::vector<float> params, buffer;
      std::uint64_t steps = 0;
    };
    std::vector<Run> runs(static_cast<std::size_t>(c.world));
    auto errors = run_bounded(c.world, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& g) {
      auto model = std::static_pointer_cast<BufferedProbe>(init->clone());  // shares init's log
      parallel::DistributedDataParallelOptions o;
      o.device_ids = cpus(c.devices);
      o.threads_per_device = 1;
      parallel::DistributedDataParallel ddp(model, g, o);
      optim::SGD sgd(ddp.parameters(), optim::SGDOptions{.lr = 0.1});
      for (const auto& [x, y] : data[static_cast<std::size_t>(rank)]) {
        sgd.zero_grad();
        ddp.forward_backward(x, y, mse);
        sgd.step();
      }
      ddp.join();
      runs[static_cast<std::size_t>(rank)] = {flat_params(*model),
                                              model->running.to_vector<float>(), ddp.step_count()};
    });
    for (int r = 0; r < c.world; ++r)
      ASSERT_FALSE(errors[static_cast<std::size_t>(r)])
          << "rank " << r << ": " << exception_message(errors[static_cast<std::size_t>(r)]);
    const int members = c.world * c.devices;
    EXPECT_EQ(probe_calls(*init->log, members),
              std::vector<std::vector<int>>(2, std::vector<int>(members, steps)));
    for (int r = 0; r < c.world; ++r) {
      const Run& run = runs[static_cast<std::size_t>(r)];
      EXPECT_EQ(run.steps, static_cast<std::uint64_t>(steps)) << "rank " << r;
      EXPECT_EQ(run.params, runs[0].params) << "rank " << r << ": parameters not bit-identical";
      EXPECT_EQ(run.buffer, runs[0].buffer) << "rank " << r << ": buffers not bit-identical";
    }
    // The reference: one process, each step on the active ranks' batches concatenated.
    auto ref = std::static_pointer_cast<BufferedProbe>(init->clone());
    ref->probe->log = std::make_shared<std::vector<CollectiveProbe::Entry>>();
    parallel::DataParallel dp(ref, cpus(1));
    optim::SGD sgd(dp.parameters(), optim::SGDOptions{.lr = 0.1});
    for (int s = 0; s < steps; ++s) {
      std::vector<Tensor> xs, ys;
      for (const auto& batches : data)
        if (s < static_cast<int>(batches.size())) {
          xs.push_back(batches[static_cast<std::size_t>(s)].first);
          ys.push_back(batches[static_cast<std::size_t>(s)].second);
        }
      sgd.zero_grad();
      dp.forward_backward(cat(xs, 0), cat(ys, 0), mse);
      sgd.step();
    }
    const std::vector<float> expected = flat_params(*ref);
    EXPECT_TRUE(AllClose(std::vector<double>(runs[0].params.begin(), runs[0].params.end()),
                         std::vector<double>(expected.begin(), expected.end())));
    // Each step's forward collective gave every member the mean over the active ranks' rows.
    const auto means = forward_means(*init->log, members);
    const auto ref_means = forward_means(*ref->probe->log, 1);
    for (int m = 0; m < members; ++m) {
      EXPECT_EQ(means[static_cast<std::size_t>(m)], means[0]) << "member " << m;
      EXPECT_TRUE(AllClose(means[static_cast<std::size_t>(m)], ref_means[0])) << "member " << m;
    }
  }
}

TEST(CollectivePiecesJoin, JoinWithoutATrainedBatchIsRefusedOnEveryRank) {
  // A joined rank that never trained a batch has no shape to shadow the collectives with: the
  // first step of rank 0 throws the same ValueError on every rank, naming the ranks.
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    auto errors = run_bounded(world, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& g) {
      auto probe = std::make_shared<CollectiveProbe>();
      parallel::DistributedDataParallel ddp(probe, g, {});
      for (int s = 0; s < (rank == 0 ? 2 : 0); ++s)
        ddp.forward_backward(randn({2, 3}), randn({2, 2}), mse);
      ddp.join();
    });
    const std::string ranks = world == 2 ? "1" : "1,2";
    expect_same_value_error(errors, {"rank(s) " + ranks + " called join()", "runs_collectives()",
                                     "rank(s) " + ranks + " never trained a batch"});
  }
}

TEST(CollectivePiecesJoin, DeterministicJoinIsRefusedOnEveryRank) {
  // Deterministic mode's shard group needs a shard on every rank: rank 1 joins after one step
  // and rank 0's second step throws the same ValueError on both ranks instead of hanging.
  auto errors = run_bounded(2, [&](int rank, const std::shared_ptr<dist::ProcessGroup>& g) {
    auto probe = std::make_shared<CollectiveProbe>();
    parallel::DistributedDataParallelOptions o;
    o.deterministic = true;
    o.shard_size = 2;
    parallel::DistributedDataParallel ddp(probe, g, o);
    for (int s = 0; s < (rank == 0 ? 2 : 1); ++s)
      ddp.forward_backward(randn({2, 3}), randn({2, 2}), mse);
    ddp.join();
  });
  expect_same_value_error(errors, {"rank(s) 1 called join()", "runs_collectives()",
                                   "in deterministic mode", "a shard on every rank"});
}

}  // namespace
}  // namespace lockstep::testing
