// Collective test bodies shared by every ProcessGroup backend: tests/dist runs them on the
// threads backend (one thread per rank), tests/mpi on the mpi backend (one process per rank,
// under mpirun). Each body is called on every rank with that rank's group and runs the same
// collectives in the same order on every rank, whatever it finds: failures are reported with
// EXPECT_* (never ASSERT_*, which would return early and leave the other ranks waiting), each
// naming the rank.
//
// Data: element i of rank r is a hash of (salt, r, i): floats of both signs with exponents in
// [-8, 8] (so the order of a sum changes its bits), int64 in [-1e6, 1e6]. The expected result is
// computed here, sequentially, in rank order (((rank 0 op rank 1) op rank 2) ...), and compared
// bit for bit: that is the order ProcessGroup promises, on every backend.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/helpers.h"

namespace lockstep::testing::collectives {

/// Element counts worth testing on `world` ranks: empty, one element, fewer elements than ranks,
/// slices of different lengths (numel not a multiple of world), and `large` (odd).
inline std::vector<std::int64_t> sizes(int world, std::int64_t large) {
  std::vector<std::int64_t> s{0, 1, 7, 2 * world + 1, 1000, large};
  if (world > 2) s.push_back(world - 1);
  return s;
}

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class T>
T sample(int rank, std::int64_t i, std::uint64_t salt) {
  const std::uint64_t h =
      mix(mix(salt) ^ (static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(i));
  if constexpr (std::is_same_v<T, std::int64_t>) {
    return static_cast<std::int64_t>(h % 2000001) - 1000000;
  } else {
    const double mantissa = 1.0 + static_cast<double>(h >> 11) * 0x1.0p-53;
    const int exponent = static_cast<int>((h >> 1) % 17) - 8;
    return static_cast<T>((h & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, exponent));
  }
}

template <class T>
DType dtype_of_v() {
  return dtype_of<T>::value;
}

/// Rank `rank`'s tensor of `numel` elements for `salt`.
template <class T>
Tensor make(std::int64_t numel, int rank, std::uint64_t salt) {
  Tensor t = empty({numel}, dtype_of_v<T>());
  T* p = t.data_ptr<T>();
  for (std::int64_t i = 0; i < numel; ++i) p[i] = sample<T>(rank, i, salt);
  return t;
}

template <class T>
T combine(dist::ReduceOp op, T a, T b) {
  switch (op) {
    case dist::ReduceOp::Sum:
      return a + b;
    case dist::ReduceOp::Max:
      return a > b ? a : b;
    case dist::ReduceOp::Min:
      return a < b ? a : b;
  }
  return a;
}

/// The reduction over ranks 0..world-1 of make<T>(numel, r, salt), sequentially in rank order.
template <class T>
std::vector<T> rank_order(dist::ReduceOp op, int world, std::int64_t numel, std::uint64_t salt,
                          bool reverse = false) {
  std::vector<T> acc(static_cast<std::size_t>(numel));
  for (std::int64_t i = 0; i < numel; ++i) {
    T a = sample<T>(reverse ? world - 1 : 0, i, salt);
    for (int k = 1; k < world; ++k)
      a = combine(op, a, sample<T>(reverse ? world - 1 - k : k, i, salt));
    acc[static_cast<std::size_t>(i)] = a;
  }
  return acc;
}

/// Bitwise equality of `t`'s elements with `want` (same count, same bits).
template <class T>
::testing::AssertionResult same_bits(const Tensor& t, const std::vector<T>& want) {
  if (t.numel() != static_cast<std::int64_t>(want.size()) || t.dtype() != dtype_of_v<T>())
    return ::testing::AssertionFailure() << "got " << t.numel() << " " << to_string(t.dtype())
                                         << " elements, want " << want.size();
  const T* p = t.data_ptr<T>();
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&p[i], &want[i], sizeof(T)) != 0) {
      std::ostringstream s;
      s.precision(17);
      s << "element " << i << " of " << want.size() << ": " << p[i] << " vs expected " << want[i];
      return ::testing::AssertionFailure() << s.str();
    }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "sizes or dtypes differ";
  if (a.numel() > 0 &&
      std::memcmp(a.raw_data(), b.raw_data(),
                  static_cast<std::size_t>(a.numel()) * element_size(a.dtype())) != 0)
    return ::testing::AssertionFailure() << "bits differ";
  return ::testing::AssertionSuccess();
}

template <class F>
void for_each_dtype(F&& f) {
  f(float{});
  f(double{});
  f(std::int64_t{});
}

inline const char* op_name(dist::ReduceOp op) {
  return op == dist::ReduceOp::Sum ? "sum" : op == dist::ReduceOp::Max ? "max" : "min";
}

constexpr dist::ReduceOp kOps[] = {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min};

/// Calls f(T{}, op, numel, salt) for every dtype T, op and size (`large` for sums only), each
/// case with its own salt (counted up from `salt`).
template <class F>
void for_each_case(int world, std::int64_t large, std::uint64_t& salt, F&& f) {
  for_each_dtype([&](auto zero) {
    for (dist::ReduceOp op : kOps)
      for (std::int64_t numel : sizes(world, op == dist::ReduceOp::Sum ? large : 1001))
        f(zero, op, numel, ++salt);
  });
}

/// all_reduce of every dtype, op and size (`large` for sums only): bit-equal to the sequential
/// rank-order reduction on every rank, and bit-identical across ranks (all_gather of the results).
inline void all_reduce_matches_rank_order(dist::ProcessGroup& g, std::int64_t large) {
  const int r = g.rank(), n = g.size();
  std::uint64_t salt = 1;
  for_each_case(n, large, salt, [&](auto zero, dist::ReduceOp op, std::int64_t numel,
                                    std::uint64_t seed) {
    using T = decltype(zero);
    Tensor t = make<T>(numel, r, seed);
    g.all_reduce(t, op);
    EXPECT_TRUE(same_bits(t, rank_order<T>(op, n, numel, seed)))
        << "rank " << r << " of " << n << ", " << to_string(t.dtype()) << " " << op_name(op)
        << ", " << numel << " elements";
    std::vector<Tensor> all;
    for (int k = 0; k < n; ++k) all.push_back(empty({numel}, t.dtype()));
    g.all_gather(all, t);
    for (int k = 0; k < n; ++k)
      EXPECT_TRUE(same_bits(all[static_cast<std::size_t>(k)], t))
          << "rank " << k << "'s result differs from rank " << r << "'s (" << to_string(t.dtype())
          << " " << op_name(op) << ", " << numel << " elements)";
  });
  // The data can tell orders apart: with 3 or more ranks, summing in reverse rank order changes
  // some bits (with 2, a + b == b + a exactly).
  if (n >= 3) {
    EXPECT_NE(rank_order<float>(dist::ReduceOp::Sum, n, 1000, 7),
              rank_order<float>(dist::ReduceOp::Sum, n, 1000, 7, true));
  }
}

/// reduce to every destination rank, every dtype, op and size (`large` for sums only): the
/// destination's tensor is bit-equal to the sequential rank-order reduction (the other ranks'
/// tensors are unspecified); a destination outside [0, size()) is a ValueError on every rank.
inline void reduce_matches_rank_order(dist::ProcessGroup& g, std::int64_t large) {
  const int r = g.rank(), n = g.size();
  std::uint64_t salt = 1000;
  for (int dst = 0; dst < n; ++dst)
    for_each_case(n, large, salt, [&](auto zero, dist::ReduceOp op, std::int64_t numel,
                                      std::uint64_t seed) {
      using T = decltype(zero);
      Tensor t = make<T>(numel, r, seed);
      g.reduce(t, dst, op);
      if (r == dst) {
        EXPECT_TRUE(same_bits(t, rank_order<T>(op, n, numel, seed)))
            << "destination rank " << dst << " of " << n << ", " << to_string(t.dtype()) << " "
            << op_name(op) << ", " << numel << " elements";
      }
    });
  for (int bad : {-1, n}) {
    Tensor t = make<float>(3, r, 1);
    try {
      g.reduce(t, bad);
      ADD_FAILURE() << "rank " << r << ": reduce to rank " << bad << " of " << n << " succeeded";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("root " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

/// reduce_scatter of every dtype, op and size (`large` for sums only): rank r receives the
/// rank-order reduction of every rank's inputs[r].
inline void reduce_scatter_matches_rank_order(dist::ProcessGroup& g, std::int64_t large) {
  const int r = g.rank(), n = g.size();
  std::uint64_t salt = 1000;
  for_each_dtype([&](auto zero) {
    using T = decltype(zero);
    for (dist::ReduceOp op : kOps)
      for (std::int64_t numel : sizes(n, op == dist::ReduceOp::Sum ? large : 1001)) {
        salt += static_cast<std::uint64_t>(n);
        std::vector<Tensor> inputs;
        for (int j = 0; j < n; ++j) inputs.push_back(make<T>(numel, r, salt + j));
        Tensor out = full({numel}, -3.0, dtype_of_v<T>());
        g.reduce_scatter(out, inputs, op);
        EXPECT_TRUE(same_bits(out, rank_order<T>(op, n, numel, salt + r)))
            << "rank " << r << " of " << n << ", " << to_string(out.dtype()) << " " << op_name(op)
            << ", " << numel << " elements";
      }
  });
}

/// broadcast from every root, every dtype and size: every rank ends with the root's bits.
inline void broadcast_from_every_root(dist::ProcessGroup& g, std::int64_t large) {
  const int r = g.rank(), n = g.size();
  std::uint64_t salt = 2000;
  for_each_dtype([&](auto zero) {
    using T = decltype(zero);
    for (int root = 0; root < n; ++root)
      for (std::int64_t numel : sizes(n, large)) {
        ++salt;
        Tensor t = make<T>(numel, r, salt);
        g.broadcast(t, root);
        std::vector<T> want(static_cast<std::size_t>(numel));
        for (std::int64_t i = 0; i < numel; ++i)
          want[static_cast<std::size_t>(i)] = sample<T>(root, i, salt);
        EXPECT_TRUE(same_bits(t, want)) << "rank " << r << ", root " << root << ", "
                                        << to_string(t.dtype()) << ", " << numel << " elements";
      }
  });
}

/// all_gather of every dtype and size: outputs[k] holds rank k's input on every rank.
inline void all_gather_collects_every_rank(dist::ProcessGroup& g, std::int64_t large) {
  const int r = g.rank(), n = g.size();
  std::uint64_t salt = 3000;
  for_each_dtype([&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t numel : sizes(n, large)) {
      ++salt;
      std::vector<Tensor> outs;
      for (int k = 0; k < n; ++k) outs.push_back(zeros({numel}, dtype_of_v<T>()));
      g.all_gather(outs, make<T>(numel, r, salt));
      for (int k = 0; k < n; ++k) {
        std::vector<T> want(static_cast<std::size_t>(numel));
        for (std::int64_t i = 0; i < numel; ++i)
          want[static_cast<std::size_t>(i)] = sample<T>(k, i, salt);
        EXPECT_TRUE(same_bits(outs[static_cast<std::size_t>(k)], want))
            << "rank " << r << ", output " << k << ", " << to_string(dtype_of_v<T>()) << ", "
            << numel << " elements";
      }
    }
  });
}

/// barrier: no rank leaves before every rank has entered. Rank r enters r * 5 ms late; entry and
/// exit times (system_clock, one machine) are gathered and max(entry) <= min(exit) is checked.
inline void barrier_waits_for_every_rank(dist::ProcessGroup& g) {
  const int r = g.rank(), n = g.size();
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));
    const std::int64_t entered = now_ns();
    g.barrier();
    const std::int64_t left = now_ns();
    std::vector<Tensor> times;
    for (int k = 0; k < n; ++k) times.push_back(zeros({2}, kInt64));
    g.all_gather(times, tensor(std::vector<std::int64_t>{entered, left}));
    std::int64_t last_entry = 0, first_exit = INT64_MAX;
    for (const auto& t : times) {
      last_entry = std::max(last_entry, t.data_ptr<std::int64_t>()[0]);
      first_exit = std::min(first_exit, t.data_ptr<std::int64_t>()[1]);
    }
    EXPECT_LE(last_entry, first_exit) << "rank " << r << ", round " << round
                                      << ": a rank left the barrier before the last one entered";
  }
}

/// all_reduce with rank 1 passing 5 elements and the others 4: ShapeError naming rank 1 on every
/// rank; then dtype float64 on rank 1: DTypeError naming rank 1 on every rank. The group stays
/// usable (a correct all_reduce follows each). Needs 2 ranks or more.
inline void mismatch_fails_on_every_rank(dist::ProcessGroup& g) {
  const int r = g.rank(), n = g.size();
  Tensor t = zeros({r == 1 ? 5 : 4});
  expect_error<ShapeError>([&] { g.all_reduce(t); }, {"rank 1", "5", "4"});
  Tensor ok = full({3}, 1.0);
  g.all_reduce(ok);
  EXPECT_EQ(ok.to_vector<double>(), std::vector<double>(3, n)) << "rank " << r;
  Tensor d = zeros({4}, r == 1 ? kFloat64 : kFloat32);
  expect_error<DTypeError>([&] { g.all_reduce(d); }, {"rank 1", "float64", "float32"});
  Tensor ok2 = full({2}, 2.0, kFloat64);
  g.all_reduce(ok2, dist::ReduceOp::Max);
  EXPECT_EQ(ok2.to_vector<double>(), std::vector<double>(2, 2.0)) << "rank " << r;
}

/// The original small cases: sums, max and min with exact small values; broadcast, all_gather,
/// reduce_scatter and barrier in one sequence.
inline void small_exact_values(dist::ProcessGroup& g) {
  const int r = g.rank(), size = g.size();
  Tensor t = tensor({float(r), float(10 * r), 1.0f, -float(r)});
  g.all_reduce(t);
  const double s = size * (size - 1) / 2.0;
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{s, 10 * s, double(size), -s}))
      << "rank " << r;
  Tensor m = tensor(std::vector<std::int64_t>{r, -r});
  g.all_reduce(m, dist::ReduceOp::Max);
  EXPECT_EQ(m.to_vector<std::int64_t>(), (std::vector<std::int64_t>{size - 1, 0})) << "rank " << r;
  Tensor mn = tensor(std::vector<double>{double(r)}, {}, kFloat64);
  g.all_reduce(mn, dist::ReduceOp::Min);
  EXPECT_EQ(mn.item(), 0.0) << "rank " << r;
  Tensor b = full({3}, r == size - 1 ? 42.0 : -1.0);
  g.broadcast(b, size - 1);
  EXPECT_EQ(b.to_vector<double>(), std::vector<double>(3, 42.0)) << "rank " << r;
  std::vector<Tensor> outs;
  for (int i = 0; i < size; ++i) outs.push_back(zeros({2}));
  g.all_gather(outs, full({2}, r));
  for (int i = 0; i < size; ++i)
    EXPECT_EQ(outs[static_cast<std::size_t>(i)].to_vector<double>(), std::vector<double>(2, i))
        << "rank " << r;
  std::vector<Tensor> ins;
  for (int i = 0; i < size; ++i) ins.push_back(full({2}, i + r));
  Tensor out = zeros({2});
  g.reduce_scatter(out, ins);
  const double want = size * r + size * (size - 1) / 2.0;
  EXPECT_EQ(out.to_vector<double>(), std::vector<double>(2, want)) << "rank " << r;
  g.barrier();
}

}  // namespace lockstep::testing::collectives
