// GradientReducer on the threads backend: a slice that got no gradient in a step contributes
// zeros (the buffer is not zeroed between steps), reduction to one rank, the has-grad flags
// carried by the last bucket; DataParallel's CPU replicas reading the master's memory; the
// in-process ProcessGroup::reduce under both.
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

// Runs body(rank) on one thread per rank; an exception fails the test naming the rank.
void on_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// One rank's parameters a [3] and b [2] in a flat buffer, with its reducer.
struct RankState {
  Tensor a = ones({3}).requires_grad_(true);
  Tensor b = ones({2}).requires_grad_(true);
  parallel::FlatBuffer flat;
  std::unique_ptr<parallel::GradientReducer> reducer;
};

// `n` ranks of a thread group, each with its parameters and reducer. The reducers hold pointers
// into the states, so they are built in place in a vector that never grows afterwards.
std::vector<RankState> make_ranks(int n, parallel::ReducerOptions options, int root) {
  auto groups = dist::new_thread_group(n);
  std::vector<RankState> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& st = ranks[static_cast<std::size_t>(r)];
    st.flat = parallel::FlatBuffer::build({st.a, st.b}, cpu(0));
    st.reducer = std::make_unique<parallel::GradientReducer>(
        st.flat, groups[static_cast<std::size_t>(r)], options, root);
  }
  return ranks;
}

// Gradient that rank r produces for a (b: ten times it) in step s.
double grad_value(int r, int s) { return (s + 1) * (r + 1); }

TEST(GradientReducer, ASliceWithoutAGradientThisStepContributesZerosNotTheLastStepsValues) {
  // Step 0: both ranks give a and b a gradient. Step 1: rank 1 gives b none, so b's sum is rank
  // 0's alone, although rank 1's slice of b still holds step 0's values. Step 2: nobody gives b
  // a gradient, so it has none. Every bucket layout, overlap on and off, and both all_reduce
  // (root -1) and reduce to rank 0.
  for (std::int64_t cap : {std::int64_t{1}, std::int64_t{1} << 20})
    for (bool overlap : {true, false})
      for (int root : {-1, 0}) {
        const std::string what = "cap " + std::to_string(cap) + ", overlap " +
                                 std::to_string(overlap) + ", root " + std::to_string(root);
        auto ranks = make_ranks(
            2, parallel::ReducerOptions{.bucket_cap_bytes = cap, .overlap = overlap}, root);
        for (int s = 0; s < 3; ++s) {
          on_threads(2, [&](int r) {
            auto& st = ranks[static_cast<std::size_t>(r)];
            st.reducer->prepare();
            Tensor loss = sum(mul(st.a, grad_value(r, s)));
            const bool uses_b = s == 0 || (s == 1 && r == 0);
            if (uses_b) loss = add(loss, sum(mul(st.b, 10 * grad_value(r, s))));
            loss.backward();
            st.reducer->finalize();
          });
          for (int r = 0; r < 2; ++r) {
            if (root >= 0 && r != root) continue;  // unspecified on the other ranks
            auto& st = ranks[static_cast<std::size_t>(r)];
            const double ga = grad_value(0, s) + grad_value(1, s);
            const double gb = s == 0 ? 10 * ga : 10 * grad_value(0, s);
            const std::string at =
                what + ", step " + std::to_string(s) + ", rank " + std::to_string(r);
            EXPECT_TRUE(st.reducer->has_grad(0)) << at;
            ASSERT_TRUE(st.a.grad().defined()) << at;
            EXPECT_EQ(st.a.grad().to_vector<float>(), std::vector<float>(3, float(ga))) << at;
            EXPECT_EQ(st.reducer->has_grad(1), s < 2) << at;
            if (s < 2) {
              ASSERT_TRUE(st.b.grad().defined()) << at;
              EXPECT_EQ(st.b.grad().to_vector<float>(), std::vector<float>(2, float(gb))) << at;
            } else {
              EXPECT_FALSE(st.b.grad().defined()) << at;
            }
            // .grad is the rank's slice of the reduced buffer
            EXPECT_EQ(st.a.grad().raw_data(), st.reducer->flat_grad().raw_data()) << at;
          }
        }
      }
}

TEST(GradientReducer, AGradientOnOneRankOnlyReachesTheRootWithItsFlag) {
  auto ranks = make_ranks(3, parallel::ReducerOptions{}, 0);
  on_threads(3, [&](int r) {
    auto& st = ranks[static_cast<std::size_t>(r)];
    st.reducer->prepare();
    Tensor loss = sum(mul(st.a, 1.0));
    if (r == 2) loss = add(loss, sum(mul(st.b, 5.0)));  // only rank 2 uses b
    loss.backward();
    st.reducer->finalize();
  });
  auto& root = ranks[0];
  EXPECT_TRUE(root.reducer->has_grad(1));
  ASSERT_TRUE(root.b.grad().defined());
  EXPECT_EQ(root.b.grad().to_vector<float>(), std::vector<float>(2, 5.f));
  EXPECT_EQ(root.a.grad().to_vector<float>(), std::vector<float>(3, 3.f));
  // The flags travel with the last (here: only) bucket: one collective per step.
  EXPECT_EQ(root.reducer->num_buckets(), 1u);
}

TEST(GradientReducer, AbandonCountsAsNotCompletedAndTheSumsAreThereEitherWay) {
  // 4-byte buckets: a and b each in their own bucket (the flags then travel with the last one).
  for (bool fail : {false, true}) {
    auto ranks = make_ranks(3, parallel::ReducerOptions{.bucket_cap_bytes = 4}, 0);
    on_threads(3, [&](int r) {
      auto& st = ranks[static_cast<std::size_t>(r)];
      st.reducer->prepare();
      sum(add(mul(st.a, 2.0), sum(st.b))).backward();
      if (fail && r == 1)
        st.reducer->abandon();
      else
        st.reducer->finalize();
    });
    const std::string what = fail ? "rank 1 abandoned" : "all completed";
    // The flags rode with the last bucket to the root (rank 0), where they are valid.
    const auto& root = *ranks[0].reducer;
    EXPECT_EQ(root.completed_ranks(), fail ? 2 : 3) << what;
    EXPECT_TRUE(root.has_grad(0) && root.has_grad(1)) << what;
    EXPECT_EQ(root.num_buckets(), 2u);
    // The sums are there either way (a failed rank contributes what it has).
    EXPECT_EQ(ranks[0].a.grad().to_vector<float>(), std::vector<float>(3, 6.f)) << what;
  }
}

TEST(GradientReducer, RootOutsideTheGroupIsAValueError) {
  auto groups = dist::new_thread_group(2);
  Tensor a = ones({3}).requires_grad_(true);
  auto flat = parallel::FlatBuffer::build({a}, cpu(0));
  expect_error<ValueError>(
      [&] { parallel::GradientReducer r(flat, groups[0], parallel::ReducerOptions{}, 2); },
      {"root 2", "2 ranks"});
}

TEST(DataParallel, CpuReplicasReadTheMastersMemoryAndNothingIsCopiedToThem) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  nn::DataParallel dp(model, cpus(3), std::nullopt, o);
  auto master = model->parameters();
  for (std::size_t k = 0; k < 3; ++k) {
    auto params = dp.replica(k)->parameters();
    ASSERT_EQ(params.size(), master.size());
    for (std::size_t j = 0; j < params.size(); ++j) {
      EXPECT_EQ(params[j].raw_data(), master[j].raw_data()) << "replica " << k << " param " << j;
      EXPECT_EQ(params[j].device(), cpu(static_cast<int>(k))) << "replica " << k;
    }
  }
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.5});
  Tensor x = randn({6, 3});
  Tensor y = randint(0, 2, {6});
  dp.forward_backward(x, y, nn::CrossEntropyLoss());
  // Only gradients move: one bucket per replica, reduced to replica 0, of the 8 gradient
  // elements plus the 2 has-grad flags padded to 16 floats (one 64-byte line).
  EXPECT_EQ(dp.bytes_moved_last_step(), 3 * (16 + 8) * 4);
  // One device: nothing to copy and nothing to reduce.
  nn::DataParallel one(std::make_shared<nn::Linear>(3, 2), cpus(1), std::nullopt, o);
  one.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_EQ(one.bytes_moved_last_step(), 0);
  opt.step();
  for (std::size_t k = 1; k < 3; ++k)
    EXPECT_TRUE(BitEqual(dp.replica(k)->parameters()[0], model->weight)) << "replica " << k;
  // The stepped parameters are what the next step's replicas compute with: the same loss as the
  // plain model.
  Tensor want = nn::CrossEntropyLoss()(model->forward(x), y);
  Tensor got = dp.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_TRUE(AllClose(got, want));
}

// The master's .grad views replica 0's reducer buffer; a .grad tensor someone still holds must
// behave as in PyTorch: without zero_grad() the next step accumulates into it in place; after
// zero_grad() (set to none) it keeps its values. Found by a breaker test; both paths.
TEST(DataParallel, AHeldGradKeepsPyTorchSemanticsAcrossSteps) {
  for (bool gather : {false, true}) {
    manual_seed(11);
    auto ref = std::make_shared<nn::Linear>(6, 3);
    auto model = std::static_pointer_cast<nn::Linear>(ref->clone());
    parallel::DataParallelOptions o;
    o.threads_per_device = 1;
    nn::DataParallel dp(model, cpus(2), std::nullopt, o);
    nn::CrossEntropyLoss ce;
    auto step = [&](const Tensor& x, const Tensor& y) {
      ce(ref->forward(x), y).backward();
      if (gather)
        ce(dp.forward(x), y).backward();
      else
        dp.forward_backward(x, y, ce);
    };
    const std::string what = gather ? "gather path" : "reducer path";
    Tensor x = randn({6, 6}), y = randint(0, 3, {6});
    Tensor x2 = randn({6, 6}), y2 = randint(0, 3, {6});
    step(x, y);
    Tensor held = model->weight.grad();  // the plain model's equivalent: ref->weight.grad()
    step(x2, y2);                        // no zero_grad: accumulates into `held` in place
    EXPECT_TRUE(AllClose(held, ref->weight.grad(), 1e-5, 1e-6)) << what;
    EXPECT_TRUE(AllClose(model->weight.grad(), ref->weight.grad(), 1e-5, 1e-6)) << what;
    Tensor kept = model->weight.grad();
    Tensor snapshot = kept.clone();
    ref->zero_grad();
    model->zero_grad();
    step(x, y);  // a new .grad; `kept` keeps its values
    EXPECT_TRUE(BitEqual(kept, snapshot)) << what;
    EXPECT_TRUE(AllClose(model->weight.grad(), ref->weight.grad(), 1e-5, 1e-6)) << what;
  }
}

// Replicas and reducers follow the requires_grad flags at wrapping time: changing one afterwards
// is an error naming the parameter, not a silently wrong gradient (a breaker test found the
// master getting a gradient for a parameter frozen after wrapping).
TEST(DataParallel, FreezingAParameterAfterWrappingIsAValueError) {
  auto model = std::make_shared<nn::Linear>(3, 2);
  parallel::DataParallelOptions o;
  o.threads_per_device = 1;
  nn::DataParallel dp(model, cpus(2), std::nullopt, o);
  Tensor x = randn({4, 3});
  Tensor y = randint(0, 2, {4});
  model->weight.requires_grad_(false);
  expect_error<ValueError>(
      [&] { dp.forward_backward(x, y, nn::CrossEntropyLoss()); },
      {"parameter 0", "[2, 3]", "requires_grad=false", "wrap the module again"});
  expect_error<ValueError>([&] { (void)dp.forward(x); }, {"parameter 0"});
  {
    NoGradGuard no_grad;  // evaluation computes no gradient: allowed
    EXPECT_EQ(dp.forward(x).size(0), 4);
  }
  model->weight.requires_grad_(true);  // back as wrapped: works again
  dp.forward_backward(x, y, nn::CrossEntropyLoss());
  EXPECT_TRUE(model->weight.grad().defined());
}

TEST(Storage, AnAliasSharesCpuMemoryUnderAnotherDeviceAndOnlyCpu) {
  auto base = std::make_shared<Storage>(64, cpu(0));
  {
    Storage alias(base, cpu(1));
    EXPECT_EQ(alias.data(), base->data());
    EXPECT_EQ(alias.nbytes(), 64u);
    EXPECT_EQ(alias.device(), cpu(1));
  }
  EXPECT_NE(base->data(), nullptr);  // the alias freed nothing
  expect_error<DeviceError>([&] { Storage bad(base, Device(DeviceType::CUDA, 0)); }, {"cuda:0"});
  expect_error<DeviceError>([] { Storage bad(nullptr, cpu(1)); }, {"CPU"});
}

}  // namespace
}  // namespace lockstep::testing
