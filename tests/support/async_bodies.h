// Test bodies of ProcessGroup's asynchronous collectives (*_async, Work), shared by the threads
// backend (tests/dist/async_collectives_test.cpp, one thread per rank) and the mpi backend
// (tests/mpi/async_mpi_test.cpp, one process per rank). Like collective_bodies.h (whose data and
// comparisons they use), each body runs the same collectives in the same order on every rank and
// reports with EXPECT_* only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/collective_bodies.h"

namespace lockstep::testing::async_collectives {

using namespace collectives;  // make, sample, same_bits, sizes, for_each_dtype, kOps, op_name

enum class Kind { AllReduce, Reduce, AllGather, ReduceScatter };
constexpr Kind kKinds[] = {Kind::AllReduce, Kind::Reduce, Kind::AllGather, Kind::ReduceScatter};

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce:
      return "all_reduce";
    case Kind::Reduce:
      return "reduce";
    case Kind::AllGather:
      return "all_gather";
    case Kind::ReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

/// One rank's tensors of one collective: `io` is reduced in place (all_reduce, reduce), gathered
/// (all_gather's input) or written (reduce_scatter's output); `list` holds all_gather's outputs
/// or reduce_scatter's inputs. The reduce destination is the last rank (not the default 0).
struct Call {
  Kind kind;
  dist::ReduceOp op;
  Tensor io;
  std::vector<Tensor> list;

  template <class T>
  static Call make(Kind kind, dist::ReduceOp op, std::int64_t numel, int rank, int world,
                   std::uint64_t seed) {
    Call c{kind, op, collectives::make<T>(numel, rank, seed), {}};
    if (kind == Kind::AllGather)
      for (int k = 0; k < world; ++k) c.list.push_back(full({numel}, -7.0, c.io.dtype()));
    if (kind == Kind::ReduceScatter) {
      for (int j = 0; j < world; ++j)
        c.list.push_back(collectives::make<T>(numel, rank, seed * 131 + j));
      c.io = full({numel}, -7.0, c.io.dtype());
    }
    return c;
  }

  std::shared_ptr<dist::Work> start(dist::ProcessGroup& g) {
    switch (kind) {
      case Kind::AllReduce:
        return g.all_reduce_async(io, op);
      case Kind::Reduce:
        return g.reduce_async(io, g.size() - 1, op);
      case Kind::AllGather:
        return g.all_gather_async(list, io);
      case Kind::ReduceScatter:
        return g.reduce_scatter_async(io, list, op);
    }
    return nullptr;
  }

  void block(dist::ProcessGroup& g) {
    switch (kind) {
      case Kind::AllReduce:
        return g.all_reduce(io, op);
      case Kind::Reduce:
        return g.reduce(io, g.size() - 1, op);
      case Kind::AllGather:
        return g.all_gather(list, io);
      case Kind::ReduceScatter:
        return g.reduce_scatter(io, list, op);
    }
  }

  /// Bit equality of what the collective promises on rank `rank` (reduce: the destination's
  /// tensor only).
  ::testing::AssertionResult same_result(const Call& other, int rank, int world) const {
    if (kind == Kind::Reduce && rank != world - 1) return ::testing::AssertionSuccess();
    if (kind != Kind::AllGather) return same_bits(io, other.io);
    for (std::size_t k = 0; k < list.size(); ++k)
      if (auto r = same_bits(list[k], other.list[k]); !r) return r << " (output " << k << ")";
    return ::testing::AssertionSuccess();
  }

  std::string describe(int rank) const {
    return std::string(kind_name(kind)) + " " + op_name(op) + " " + to_string(io.dtype()) + ", " +
           std::to_string(io.numel()) + " elements, rank " + std::to_string(rank);
  }
};

/// Every kind, dtype, op and size (`large` for sums only) started asynchronously, all of one
/// dtype at once (tens of collectives pending), then each one's blocking twin on a copy of the
/// same data (the first blocking call waits for the started ones), then the Works waited for:
/// bit-identical results. All_gather runs once per size (it has no op).
inline void async_matches_blocking(dist::ProcessGroup& g, std::int64_t large) {
  const int r = g.rank(), n = g.size();
  std::uint64_t salt = 5000;
  for_each_dtype([&](auto zero) {
    using T = decltype(zero);
    std::vector<Call> started, blocking;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (Kind kind : kKinds)
      for (dist::ReduceOp op : kOps) {
        if (kind == Kind::AllGather && op != dist::ReduceOp::Sum) continue;
        for (std::int64_t numel : sizes(n, op == dist::ReduceOp::Sum ? large : 1001)) {
          ++salt;
          started.push_back(Call::make<T>(kind, op, numel, r, n, salt));
          blocking.push_back(Call::make<T>(kind, op, numel, r, n, salt));
          works.push_back(started.back().start(g));
        }
      }
    for (auto& c : blocking) c.block(g);
    for (std::size_t i = 0; i < works.size(); ++i) {
      works[i]->wait();
      EXPECT_TRUE(works[i]->is_completed());
      EXPECT_TRUE(started[i].same_result(blocking[i], r, n)) << started[i].describe(r);
    }
  });
}

/// The order rule: a sequence of collectives where each rank starts some asynchronously and
/// calls others blocking (rank r's collective k is asynchronous when r + k is even, so one
/// collective is asynchronous on some ranks and blocking on others), with broadcasts and a
/// barrier (blocking only) in between, gives the bits of the same sequence run blocking.
inline void mixed_order_matches_blocking(dist::ProcessGroup& g) {
  const int r = g.rank(), n = g.size();
  auto sequence = [&](bool mixed) {
    std::vector<Call> calls;
    std::vector<Tensor> broadcasts;
    std::vector<std::shared_ptr<dist::Work>> works;
    std::uint64_t seed = 9000;
    for (int k = 0; k < 12; ++k) {
      const Kind kind = kKinds[k % 4];
      calls.push_back(Call::make<float>(kind, kOps[k % 3], 1000 + 37 * k, r, n, ++seed));
      if (mixed && (r + k) % 2 == 0)
        works.push_back(calls.back().start(g));
      else
        calls.back().block(g);
      if (k % 3 == 2) {
        broadcasts.push_back(collectives::make<double>(101, r, ++seed));
        g.broadcast(broadcasts.back(), k % n);
      }
      if (k == 7) g.barrier();
    }
    for (auto& w : works) w->wait();
    return std::pair(std::move(calls), std::move(broadcasts));
  };
  const auto [want, want_b] = sequence(false);
  const auto [got, got_b] = sequence(true);
  for (std::size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(got[k].same_result(want[k], r, n)) << "collective " << k << ": "
                                                   << got[k].describe(r);
  for (std::size_t k = 0; k < want_b.size(); ++k)
    EXPECT_TRUE(same_bits(got_b[k], want_b[k])) << "broadcast " << k << ", rank " << r;
}

/// What the bfloat16 wire format promises (process_group.h), computed here independently: every
/// rank's values rounded to bfloat16, combined in float32 in rank order, rounded once.
inline std::vector<float> bf16_rank_order(dist::ReduceOp op, int world, std::int64_t numel,
                                          std::uint64_t salt) {
  auto round = [](float x) { return dist::from_bfloat16_bits(dist::to_bfloat16_bits(x)); };
  std::vector<float> out(static_cast<std::size_t>(numel));
  for (std::int64_t i = 0; i < numel; ++i) {
    float a = round(sample<float>(0, i, salt));
    for (int k = 1; k < world; ++k) a = combine(op, a, round(sample<float>(k, i, salt)));
    out[static_cast<std::size_t>(i)] = round(a);
  }
  return out;
}

/// all_reduce_async and reduce_async (to the last rank) with WireFormat::BFloat16, every op and
/// size: bit-equal to bf16_rank_order on every rank (reduce: on the destination); the float32
/// sums of the large case differ from them (the format is applied). A float64 tensor is a
/// DTypeError from wait() on every rank, and the group stays usable.
inline void bf16_matches_emulation(dist::ProcessGroup& g, std::int64_t large) {
  const int r = g.rank(), n = g.size();
  std::uint64_t salt = 7000;
  for (dist::ReduceOp op : kOps)
    for (std::int64_t numel : sizes(n, op == dist::ReduceOp::Sum ? large : 1001)) {
      ++salt;
      const std::vector<float> want = bf16_rank_order(op, n, numel, salt);
      Tensor a = make<float>(numel, r, salt), b = make<float>(numel, r, salt);
      auto wa = g.all_reduce_async(a, op, dist::WireFormat::BFloat16);
      auto wb = g.reduce_async(b, n - 1, op, dist::WireFormat::BFloat16);
      wa->wait();
      wb->wait();
      const std::string what = std::string(op_name(op)) + ", " + std::to_string(numel) +
                               " elements, rank " + std::to_string(r) + " of " +
                               std::to_string(n);
      EXPECT_TRUE(same_bits(a, want)) << "all_reduce_async bfloat16 " << what;
      if (r == n - 1) {
        EXPECT_TRUE(same_bits(b, want)) << "reduce_async bfloat16 " << what;
      }
      if (op == dist::ReduceOp::Sum && numel == large) {
        Tensor f = make<float>(numel, r, salt);
        g.all_reduce(f);
        EXPECT_FALSE(same_bits(f, want)) << "float32 sums equal the bfloat16 ones: " << what;
      }
    }
  Tensor d = make<double>(10, r, 1);
  auto w = g.all_reduce_async(d, dist::ReduceOp::Sum, dist::WireFormat::BFloat16);
  expect_error<DTypeError>([&] { w->wait(); }, {"bfloat16", "float64"});
  Tensor ok = full({3}, 1.0);
  g.all_reduce_async(ok, dist::ReduceOp::Sum, dist::WireFormat::BFloat16)->wait();
  EXPECT_EQ(ok.to_vector<double>(), std::vector<double>(3, n)) << "rank " << r;
}

/// Bad arguments of a started collective are thrown by wait(), on every rank: rank 1's tensor
/// has 5 elements where the others have 4 (ShapeError), a reduce destination out of range on
/// every rank (ValueError). A collective started after them runs normally. Needs 2 ranks.
inline void errors_surface_from_wait(dist::ProcessGroup& g) {
  const int r = g.rank(), n = g.size();
  Tensor t = zeros({r == 1 ? 5 : 4});
  auto shape = g.all_reduce_async(t);
  Tensor u = zeros({3});
  auto root = g.reduce_async(u, n);
  Tensor ok = full({3}, 2.0);
  auto fine = g.all_reduce_async(ok);
  expect_error<ShapeError>([&] { shape->wait(); }, {"rank 1", "5", "4"});
  EXPECT_TRUE(shape->is_completed());
  expect_error<ShapeError>([&] { shape->wait(); }, {"rank 1"});  // again: the same error
  expect_error<ValueError>([&] { root->wait(); }, {"root " + std::to_string(n)});
  fine->wait();
  EXPECT_EQ(ok.to_vector<double>(), std::vector<double>(3, 2.0 * n)) << "rank " << r;
}

}  // namespace lockstep::testing::async_collectives
