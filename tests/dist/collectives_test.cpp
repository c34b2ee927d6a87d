// ProcessGroup collectives. One set of test bodies, instantiated for every backend built
// (today "threads"; MPI and NCCL add themselves to dist::available_backends()).
#include <gtest/gtest.h>

#include <thread>

#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

// Runs body(group) on `size` threads, one rank each.
void on_ranks(const std::string& backend, int size,
              const std::function<void(dist::ProcessGroup&)>& body) {
  ASSERT_EQ(backend, "threads");
  auto groups = dist::new_thread_group(size);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(*groups[static_cast<std::size_t>(r)]);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

class Collectives : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Collectives, AllReduceSumMaxMin) {
  auto [backend, size] = GetParam();
  on_ranks(backend, size, [size = size](dist::ProcessGroup& g) {
    const int r = g.rank();
    Tensor t = tensor({float(r), float(10 * r), 1.0f, -float(r)});
    g.all_reduce(t);
    double s = size * (size - 1) / 2.0;
    if (t.to_vector<double>() != std::vector<double>{s, 10 * s, double(size), -s})
      throw Error("sum wrong on rank " + std::to_string(r));
    Tensor m = tensor(std::vector<std::int64_t>{r, -r});
    g.all_reduce(m, dist::ReduceOp::Max);
    if (m.to_vector<std::int64_t>() != std::vector<std::int64_t>{size - 1, 0}) throw Error("max wrong");
    Tensor n = tensor(std::vector<double>{double(r)}, {}, kFloat64);
    g.all_reduce(n, dist::ReduceOp::Min);
    if (n.item() != 0.0) throw Error("min wrong");
  });
}

TEST_P(Collectives, BroadcastGatherScatterBarrier) {
  auto [backend, size] = GetParam();
  on_ranks(backend, size, [size = size](dist::ProcessGroup& g) {
    const int r = g.rank();
    Tensor b = full({3}, r == size - 1 ? 42.0 : -1.0);
    g.broadcast(b, size - 1);
    if (b.to_vector<double>() != std::vector<double>(3, 42.0)) throw Error("broadcast wrong");
    std::vector<Tensor> outs;
    for (int i = 0; i < size; ++i) outs.push_back(zeros({2}));
    g.all_gather(outs, full({2}, r));
    for (int i = 0; i < size; ++i)
      if (outs[static_cast<std::size_t>(i)].to_vector<double>() != std::vector<double>(2, i))
        throw Error("all_gather wrong");
    std::vector<Tensor> ins;
    for (int i = 0; i < size; ++i) ins.push_back(full({2}, i + r));
    Tensor out = zeros({2});
    g.reduce_scatter(out, ins);
    double want = size * r + size * (size - 1) / 2.0;
    if (out.to_vector<double>() != std::vector<double>(2, want)) throw Error("reduce_scatter wrong");
    g.barrier();
  });
}

TEST_P(Collectives, MismatchedSizesFailOnEveryRank) {
  auto [backend, size] = GetParam();
  if (size < 2) GTEST_SKIP() << "needs two ranks";
  auto groups = dist::new_thread_group(size);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      Tensor t = zeros({r == 1 ? 5 : 4});
      try {
        groups[static_cast<std::size_t>(r)]->all_reduce(t);
      } catch (const ShapeError& e) {
        if (std::string(e.what()).find("rank 1") != std::string::npos) ++failures;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), size);
}

std::vector<std::tuple<std::string, int>> configs() {
  std::vector<std::tuple<std::string, int>> out;
  for (const auto& b : dist::available_backends())
    for (int n : {1, 2, 3, 8}) out.emplace_back(b, n);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, Collectives, ::testing::ValuesIn(configs()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace lockstep::testing
