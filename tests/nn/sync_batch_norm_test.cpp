// SyncBatchNorm (nn/sync_batch_norm.h) and its pieces (ops/batch_norm.h): the merge of pieces
// equals one batch's statistics whatever the split (uneven and empty pieces, dropped in order),
// the split backward equals batch_norm's, the module is plain BatchNorm outside a group, and
// inside DataParallel it equals one device's BatchNorm on the whole batch: with an empty chunk,
// under no_sync() and under autocast; one value per channel over the group throws on every
// replica and changes nothing.
#include <gtest/gtest.h>

#include "lockstep/ops/batch_norm.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

// rows [pieces, 2C + 1] of x cut along dim 0 at `sizes`.
Tensor piece_rows(const Tensor& x, const std::vector<std::int64_t>& sizes) {
  std::vector<Tensor> rows;
  std::int64_t at = 0;
  const std::int64_t c = x.size(1);
  for (std::int64_t n : sizes) {
    Tensor piece = narrow(x, 0, at, n);
    at += n;
    const double count = static_cast<double>(piece.numel() / c);
    rows.push_back(
        cat({batch_norm_stats(piece).reshape({2 * c}), full({1}, count, kFloat64)}, 0)
            .reshape({1, 2 * c + 1}));
  }
  return cat(rows, 0);
}

TEST(SyncBatchNormOps, MergedPiecesEqualTheWholeBatch) {
  manual_seed(3);
  Tensor x = add(mul(randn({9, 3, 4, 5}, kFloat64), 2.0), 0.5);
  for (const auto& sizes : std::vector<std::vector<std::int64_t>>{
           {9}, {4, 5}, {3, 0, 6}, {0, 1, 1, 7, 0}, {2, 2, 2, 3}}) {
    Tensor rm = zeros({3}, kFloat64), rv = ones({3}, kFloat64);
    Tensor rm1 = rm.clone(), rv1 = rv.clone();
    const BatchNormGathered s = batch_norm_gather_stats(piece_rows(x, sizes), rm, rv, 0.1, 1e-5);
    EXPECT_EQ(s.count, 9 * 20);
    // The whole batch through batch_norm: its running update and its normalization.
    Tensor y1 = batch_norm(x, rm1, rv1, Tensor(), Tensor(), true, 0.1, 1e-5);
    EXPECT_TRUE(AllClose(rm, rm1, 1e-13, 1e-15));
    EXPECT_TRUE(AllClose(rv, rv1, 1e-13, 1e-15));
    EXPECT_TRUE(AllClose(batch_norm_elemt(x, Tensor(), Tensor(), s.mean_invstd), y1, 1e-12, 1e-13));
  }
}

TEST(SyncBatchNormOps, EmptyGroupChangesNothingAndOneValueThrows) {
  Tensor rm = full({2}, 0.25, kFloat64), rv = full({2}, 3.0, kFloat64);
  const BatchNormGathered s =
      batch_norm_gather_stats(piece_rows(zeros({0, 2}, kFloat64), {0, 0}), rm, rv, 0.1, 1e-5);
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(rm.to_vector<double>(), std::vector<double>(2, 0.25));
  EXPECT_EQ(rv.to_vector<double>(), std::vector<double>(2, 3.0));
  Tensor one = randn({1, 2}, kFloat64);
  EXPECT_THROW(batch_norm_gather_stats(piece_rows(one, {0, 1}), rm, rv, 0.1, 1e-5), ValueError);
  EXPECT_EQ(rm.to_vector<double>(), std::vector<double>(2, 0.25));  // checked before updating
  EXPECT_THROW(batch_norm_gather_stats(zeros({2, 4}, kFloat64), rm, rv, 0.1, 1e-5), ShapeError);
  const std::vector<double> bad_row{0.0, 0.0, 1.0, 1.0, -1.0};  // count -1
  const Tensor bad = tensor(std::span<const double>(bad_row), {1, 5});
  EXPECT_THROW(batch_norm_gather_stats(bad, rm, rv, 0.1, 1e-5), ValueError);
}

TEST(SyncBatchNormOps, SplitBackwardEqualsBatchNormsBackward) {
  // One piece: reduce + elemt with its own sums and count is batch_norm's training dx, and the
  // local dweight / dbias are its sums; fast and reference kernels agree.
  manual_seed(5);
  for (DType dt : {kFloat64, kFloat32}) {
    Tensor x = randn({5, 3, 6}, dt), w = randn({3}, dt), b = randn({3}, dt);
    x.requires_grad_(true);
    w.requires_grad_(true);
    b.requires_grad_(true);
    Tensor dy = randn({5, 3, 6}, dt);
    sum(mul(batch_norm(x, Tensor(), Tensor(), w, b, true), dy)).backward();
    Tensor rows = piece_rows(x.detach(), {5});
    const BatchNormGathered s = batch_norm_gather_stats(rows, Tensor(), Tensor(), 0.1, 1e-5);
    const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
    for (auto mode : {ops::KernelMode::Fast, ops::KernelMode::Reference}) {
      ops::KernelModeGuard guard(mode);
      Tensor sums = batch_norm_backward_reduce(dy, x.detach(), s.mean_invstd);
      Tensor dx = batch_norm_backward_elemt(dy, x.detach(), s.mean_invstd, w.detach(), sums,
                                            s.count);
      EXPECT_TRUE(AllClose(dx, x.grad(), tol, tol));
      EXPECT_TRUE(AllClose(narrow(sums, 0, 0, 1).reshape({3}), b.grad(), tol, tol));
    }
    EXPECT_THROW(batch_norm_backward_elemt(dy, x.detach(), s.mean_invstd, w.detach(),
                                           zeros({2, 4}, kFloat64), s.count),
                 ShapeError);
    EXPECT_THROW(batch_norm_backward_elemt(dy, x.detach(), s.mean_invstd, w.detach(),
                                           zeros({2, 3}, kFloat64), 0),
                 ValueError);
  }
}

TEST(SyncBatchNormModule, IsPlainBatchNormOutsideAGroupAndConvertKeepsNames) {
  manual_seed(7);
  nn::SyncBatchNorm sync(4);
  nn::BatchNorm2d plain(4);
  Tensor x = randn({3, 4, 5, 5});
  EXPECT_EQ(sync.forward(x).to_vector<float>(), plain.forward(x).to_vector<float>());
  EXPECT_EQ(sync.running_var.to_vector<float>(), plain.running_var.to_vector<float>());
  EXPECT_TRUE(sync.runs_collectives());
  EXPECT_FALSE(plain.runs_collectives());
  EXPECT_THROW(sync.forward(randn({3})), ShapeError);

  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::BatchNorm1d>(36)});
  const auto keys = model->state_dict().keys();
  EXPECT_FALSE(model->runs_collectives());
  nn::convert_sync_batchnorm(model);
  EXPECT_TRUE(model->runs_collectives());
  EXPECT_EQ(model->state_dict().keys(), keys);
  EXPECT_EQ(model->children()[1]->name(), "SyncBatchNorm");
  EXPECT_TRUE(model->clone()->runs_collectives());
  EXPECT_THROW(nn::convert_sync_batchnorm(nullptr), ValueError);
}

std::shared_ptr<nn::Sequential> bn_net(bool sync) {
  manual_seed(11);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1),
      std::make_shared<nn::BatchNorm2d>(3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(48, 2)});
  if (sync) nn::convert_sync_batchnorm(m);
  return m;
}

struct Step {
  std::vector<double> grads, running;
  double loss;
};
Step step(int devices, bool sync, const Tensor& x, const Tensor& y, bool no_sync = false,
          bool autocast = false) {
  auto m = bn_net(sync);
  parallel::DataParallel dp(m, cpus(devices));
  const nn::CrossEntropyLoss ce;
  Step s;
  {
    AutocastGuard ac(autocast);
    if (no_sync) {
      auto guard = dp.no_sync();
      s.loss = dp.forward_backward(x, y, ce).item();
    } else {
      s.loss = dp.forward_backward(x, y, ce).item();
    }
  }
  if (no_sync) dp.forward_backward(narrow(x, 0, 0, 0), narrow(y, 0, 0, 0), ce);
  for (auto& p : m->parameters()) {
    auto v = p.grad().to_vector<double>();
    s.grads.insert(s.grads.end(), v.begin(), v.end());
  }
  s.running = dynamic_cast<nn::BatchNormBase&>(*m->children()[1]).running_var.to_vector<double>();
  return s;
}

void expect_close(const Step& a, const Step& b, const std::string& what) {
  EXPECT_NEAR(a.loss, b.loss, 1e-5) << what;
  EXPECT_TRUE(AllClose(a.grads, b.grads, 1e-4, 1e-5)) << what << ": gradients";
  EXPECT_TRUE(AllClose(a.running, b.running, 1e-5, 1e-6)) << what << ": running_var";
}

TEST(SyncBatchNormDataParallel, EqualsOneDeviceWithEmptyChunksNoSyncAndAutocast) {
  manual_seed(13);
  const std::vector<std::int64_t> labels{0, 1, 1, 0, 1, 0, 0};
  Tensor x = randn({7, 2, 4, 4}), y = tensor(std::span<const std::int64_t>(labels));
  const Step one = step(1, false, x, y);
  for (int devices : {2, 3, 4}) expect_close(step(devices, true, x, y), one, "7 rows");
  // Plain BatchNorm differs on 3 devices (each chunk normalizes itself): the test can tell.
  EXPECT_FALSE(AllClose(step(3, false, x, y).grads, one.grads, 1e-4, 1e-5));
  // 2 rows on 3 devices: replica 2 has none and still takes part.
  Tensor x2 = narrow(x, 0, 0, 2), y2 = narrow(y, 0, 0, 2);
  expect_close(step(3, true, x2, y2), step(1, false, x2, y2), "2 rows on 3 devices");
  expect_close(step(3, true, x, y, /*no_sync=*/true), one, "under no_sync");
  // Autocast leaves batch norm (and its statistics) in float32: the BN layer's running
  // statistics equal those without autocast bit for bit.
  EXPECT_EQ(step(2, true, x, y, false, true).running, step(2, true, x, y).running);
}

TEST(SyncBatchNormDataParallel, OneValuePerChannelThrowsOnEveryReplicaAndChangesNothing) {
  // [1, 3] over 2 devices: chunk 0 has the one row, chunk 1 none; one value per channel over
  // the group.
  auto seq = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(2, 3),
                                               std::make_shared<nn::SyncBatchNorm>(3)});
  parallel::DataParallel dp1(seq, cpus(2));
  const auto before = seq->state_dict().at("1.running_mean").to_vector<float>();
  try {
    dp1.forward_backward(randn({1, 2}), randn({1, 3}),
                         [](const Tensor& o, const Tensor& t) { return mse_loss(o, t); });
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("SyncBatchNorm(3)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than 1 value per channel"), std::string::npos);
  }
  EXPECT_EQ(seq->state_dict().at("1.running_mean").to_vector<float>(), before);
  // The wrapper still works afterwards.
  EXPECT_NO_THROW(dp1.forward_backward(randn({4, 2}), randn({4, 3}), [](const Tensor& o,
                                                                       const Tensor& t) {
    return mse_loss(o, t);
  }));
}

}  // namespace
}  // namespace lockstep::testing
