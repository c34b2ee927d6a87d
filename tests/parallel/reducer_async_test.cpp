// GradientReducer's started reductions, seen through a process group that records them and
// completes each only when it is waited for: with overlap on, the gradient hook starts every
// bucket but the last during backward and nothing is waited for before finalize(), which starts
// the rest and waits for all of them in bucket order; with overlap off finalize() starts them
// all; with bf16 compression the flags are a native collective of their own; a failed reduction
// surfaces from finalize() after every other started one is waited for, and the next step is
// clean; discard() and prepare() wait for what a failed step started.
#include <gtest/gtest.h>

#include "support/helpers.h"

namespace lockstep::testing {
namespace {

// A Work that completes when waited for, logging it; fails then when told to.
class LoggedWork final : public dist::Work {
 public:
  LoggedWork(std::vector<std::string>& log, int id, bool fail) : log_(log), id_(id), fail_(fail) {}
  void wait() override {
    if (!done_) log_.push_back("wait " + std::to_string(id_));
    done_ = true;
    if (fail_) throw DistError("injected failure of collective " + std::to_string(id_));
  }
  bool is_completed() override { return done_; }

 private:
  std::vector<std::string>& log_;
  int id_;
  bool fail_, done_ = false;
};

// Rank 0 of a two-rank group whose other rank is absent: the collectives leave the tensors as
// they are and log what is started ("start N bf16" with the bfloat16 wire).
class LoggedGroup final : public dist::ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "logged"; }
  void all_reduce(Tensor&, dist::ReduceOp) override { log.push_back("blocking all_reduce"); }
  void broadcast(Tensor&, int) override {}
  void all_gather(std::vector<Tensor>&, const Tensor&) override {}
  void reduce_scatter(Tensor&, const std::vector<Tensor>&, dist::ReduceOp) override {}
  void barrier() override {}
  std::shared_ptr<dist::Work> all_reduce_async(Tensor&, dist::ReduceOp,
                                               dist::WireFormat wire) override {
    const int id = started++;
    log.push_back("start " + std::to_string(id) +
                  (wire == dist::WireFormat::BFloat16 ? " bf16" : ""));
    return std::make_shared<LoggedWork>(log, id, id == fail_id);
  }
  std::vector<std::string> log;
  int started = 0;
  int fail_id = -1;
};

// Parameters a, b, c of 2 elements each in 8-byte buckets: three buckets, c's first (backward
// produces it first), a's last.
struct Rank {
  std::shared_ptr<LoggedGroup> group = std::make_shared<LoggedGroup>();
  std::vector<Tensor> params{ones({2}).requires_grad_(true), ones({2}).requires_grad_(true),
                             ones({2}).requires_grad_(true)};
  parallel::FlatBuffer flat = parallel::FlatBuffer::build(params, cpu(0));
  parallel::GradientReducer reducer;
  explicit Rank(parallel::ReducerOptions o) : reducer(flat, group, o) {}
  void backward() {
    // c first, then b, then a in backward: a chain that uses a last in forward.
    sum(mul(mul(add(params[0], 1.0), add(params[1], 2.0)), add(params[2], 3.0))).backward();
  }
};

using Log = std::vector<std::string>;

TEST(GradientReducerAsync, HooksStartReadyBucketsAndFinalizeWaitsForAllInBucketOrder) {
  Rank s({.bucket_cap_bytes = 8, .overlap = true});
  ASSERT_EQ(s.reducer.num_buckets(), 3u);
  s.reducer.prepare();
  s.backward();
  EXPECT_EQ(s.group->log, (Log{"start 0", "start 1"})) << "nothing may wait during backward";
  s.reducer.finalize();
  EXPECT_EQ(s.group->log, (Log{"start 0", "start 1", "start 2", "wait 0", "wait 1", "wait 2"}));
  for (const Tensor& p : s.params) EXPECT_TRUE(p.grad().defined());
}

TEST(GradientReducerAsync, OverlapOffStartsEveryBucketInFinalize) {
  Rank s({.bucket_cap_bytes = 8, .overlap = false});
  s.reducer.prepare();
  s.backward();
  EXPECT_EQ(s.group->log, Log{});
  s.reducer.finalize();
  EXPECT_EQ(s.group->log, (Log{"start 0", "start 1", "start 2", "wait 0", "wait 1", "wait 2"}));
}

TEST(GradientReducerAsync, Bf16BucketsAndNativeFlagsOfTheirOwn) {
  Rank s({.bucket_cap_bytes = 8, .overlap = true, .compression = dist::WireFormat::BFloat16});
  s.reducer.prepare();
  s.backward();
  s.reducer.finalize();
  EXPECT_EQ(s.group->log, (Log{"start 0 bf16", "start 1 bf16", "start 2 bf16", "start 3", "wait 0",
                               "wait 1", "wait 2", "wait 3"}));
  // 6 gradient elements at 2 bytes, 3 + 1 flags at 4.
  EXPECT_EQ(s.reducer.bytes_reduced(), 6 * 2 + 4 * 4);
}

TEST(GradientReducerAsync, AFailedReductionSurfacesAfterEveryStartedOneIsWaitedFor) {
  for (bool abandon : {false, true}) {
    Rank s({.bucket_cap_bytes = 8, .overlap = true});
    s.group->fail_id = 0;
    s.reducer.prepare();
    s.backward();
    expect_error<DistError>([&] { abandon ? s.reducer.abandon() : s.reducer.finalize(); },
                            {"injected failure of collective 0"});
    EXPECT_EQ(s.group->log, (Log{"start 0", "start 1", "start 2", "wait 0", "wait 1", "wait 2"}))
        << (abandon ? "abandon" : "finalize");
    // The next step starts clean.
    s.group->log.clear();
    s.reducer.prepare();
    s.backward();
    s.reducer.finalize();
    EXPECT_EQ(s.group->log, (Log{"start 3", "start 4", "start 5", "wait 3", "wait 4", "wait 5"}))
        << (abandon ? "abandon" : "finalize");
  }
}

TEST(GradientReducerAsync, DiscardAndPrepareWaitForWhatAFailedStepStarted) {
  Rank s({.bucket_cap_bytes = 8, .overlap = true});
  s.reducer.prepare();
  s.backward();
  s.reducer.discard();  // a replica that failed and aborted its group
  EXPECT_EQ(s.group->log, (Log{"start 0", "start 1", "wait 0", "wait 1"}));
  s.group->log.clear();
  s.reducer.prepare();
  s.backward();
  s.reducer.prepare();  // a step that ended without finalize() or discard()
  EXPECT_EQ(s.group->log, (Log{"start 2", "start 3", "wait 2", "wait 3"}));
}

}  // namespace
}  // namespace lockstep::testing
