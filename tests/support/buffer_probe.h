// A module whose training forward updates its buffers in place, as BatchNorm updates
// running_mean and num_batches_tracked, and the DistributedDataParallel buffer checks that run
// with ranks as threads (tests/parallel/buffers_test.cpp) and as MPI processes
// (tests/mpi_ddp/buffers_mpi_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <vector>

#include "lockstep/lockstep.h"
#include "lockstep/parallel/distributed.h"

namespace lockstep::testing {

// Linear(3, 2) with two buffers: `count` (int64, 0-d) and `total` (float32 [2]). Each training
// forward adds its bump to both (`total` gets bump · [1, 0.5]); the bump is the chunk's rows, or
// the fixed `bump` when it is set. Every forward first records the `count` it found, with its
// device, in a log that all clones share.
struct BufferProbe : nn::Cloneable<BufferProbe> {
  struct Entry {
    Device device;
    std::int64_t count;
  };
  std::shared_ptr<nn::Linear> fc;
  Tensor count, total;
  std::int64_t bump = 0;  // 0: the chunk's rows
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<Entry>> log = std::make_shared<std::vector<Entry>>();

  BufferProbe() { reset(); }
  void reset() override {
    fc = register_module("fc", std::make_shared<nn::Linear>(3, 2));
    count = register_buffer("count", scalar_tensor(0, kInt64));
    total = register_buffer("total", zeros({2}));
  }
  Tensor forward(const Tensor& x) override {
    {
      std::lock_guard<std::mutex> lock(*mu);
      log->push_back({count.device(), static_cast<std::int64_t>(count.item())});
    }
    if (is_training()) {
      NoGradGuard no_grad;
      const std::int64_t b = bump > 0 ? bump : x.size(0);
      count.add_(scalar_tensor(static_cast<double>(b), count.options()));
      const float t[2] = {static_cast<float>(b), 0.5f * static_cast<float>(b)};
      total.add_(tensor(std::span<const float>(t, 2)).to(total.device()));
    }
    return fc->forward(x);
  }
  std::string name() const override { return "BufferProbe"; }
  // The counts the forwards on `device` found, in order.
  std::vector<std::int64_t> seen_on(Device device) const {
    std::lock_guard<std::mutex> lock(*mu);
    std::vector<std::int64_t> out;
    for (const Entry& e : *log)
      if (e.device == device) out.push_back(e.count);
    return out;
  }
};

// The module's buffers as plain values: count, then total.
inline std::vector<double> probe_buffers(const nn::Module& m) {
  std::vector<double> out;
  for (auto& [name, t] : m.named_buffers()) {
    auto v = t.to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// DDP with broadcast_buffers on or off, rank r bumping by r + 1 in each training forward, over
// the sequence synced, no_sync, no_sync, synced, synced (2 rows per rank and step). The count
// each rank found at each forward's entry: with broadcasts PyTorch's gate (distributed.h) sends
// the lowest active rank's buffers before the 1st, 2nd and 5th forwards; without, every rank
// counts on its own.
inline void ddp_buffer_gate_body(int rank, const std::shared_ptr<dist::ProcessGroup>& group,
                                 bool broadcast) {
  auto probe = std::make_shared<BufferProbe>();
  probe->bump = rank + 1;
  parallel::DistributedDataParallelOptions o;
  o.broadcast_buffers = broadcast;
  parallel::DistributedDataParallel ddp(probe, group, o);
  Tensor x = randn({2, 3}), y = randn({2, 2});
  auto step = [&] { ddp.forward_backward(x, y, [](const Tensor& out, const Tensor& t) {
                      return mse_loss(out, t);
                    }); };
  step();
  {
    auto guard = ddp.no_sync();
    step();
    step();
  }
  step();
  step();
  const std::int64_t b = rank + 1;
  const std::vector<std::int64_t> expected =
      broadcast ? std::vector<std::int64_t>{0, 1, 1 + b, 1 + 2 * b, 4}
                : std::vector<std::int64_t>{0, b, 2 * b, 3 * b, 4 * b};
  EXPECT_EQ(probe->seen_on(cpu(0)), expected) << "rank " << rank;
  // An explicit sync makes every rank's buffers rank 0's, bit for bit, int64 included.
  ddp.sync_buffers();
  EXPECT_EQ(probe_buffers(*probe), (std::vector<double>{5, 5, 2.5})) << "rank " << rank;
  // No collective in an evaluation forward: one rank alone may evaluate.
  if (rank == 0) {
    ddp.eval();
    NoGradGuard no_grad;
    ddp.forward(x);
  }
}

// join(): rank `early` has one batch, the others three. The joined rank's buffers follow the
// lowest active rank's while it shadows, and join() ends with that rank's buffers everywhere.
inline void ddp_buffer_join_body(int rank, const std::shared_ptr<dist::ProcessGroup>& group,
                                 int early) {
  auto probe = std::make_shared<BufferProbe>();
  probe->bump = rank + 1;
  parallel::DistributedDataParallel ddp(probe, group);
  Tensor x = randn({2, 3}), y = randn({2, 2});
  const auto loss = [](const Tensor& out, const Tensor& t) { return mse_loss(out, t); };
  for (int s = 0; s < (rank == early ? 1 : 3); ++s) ddp.forward_backward(x, y, loss);
  ddp.join();
  // The lowest rank active in steps 2 and 3 broadcasts before each and at the end: it counts
  // three bumps of its own on top of the value broadcast before step 2.
  const int winner = early == 0 ? 1 : 0;
  const double v = (winner + 1) * 3.0;
  EXPECT_EQ(probe_buffers(*probe), (std::vector<double>{v, v, v / 2})) << "rank " << rank;
}

}  // namespace lockstep::testing
