// Small helpers shared by several test executables.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {

/// The CPU devices cpu:0 ... cpu:(n-1).
inline std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(cpu(i));
  return d;
}

/// Runs `f`, expecting an exception of type E (a lockstep::Error subclass) whose message
/// contains every string in `parts`; any other outcome is a test failure.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  static_assert(std::is_base_of_v<Error, E>);
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

/// Every parameter of `m` in parameters() order, concatenated as T (for bit comparisons).
template <class T = float>
std::vector<T> flat_params(const nn::Module& m) {
  std::vector<T> out;
  for (const auto& p : m.parameters()) {
    auto v = p.to_vector<T>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

/// Runs body(rank, group) on `size` threads, rank r with element r of one
/// dist::new_thread_group(size); returns each rank's exception (null where the body returned).
inline std::vector<std::exception_ptr> run_thread_ranks(
    int size, const std::function<void(int, const std::shared_ptr<dist::ProcessGroup>&)>& body) {
  auto groups = dist::new_thread_group(size);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, groups[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

/// run_thread_ranks, then rethrows the lowest rank's exception, if any.
inline void run_ranks(
    int size, const std::function<void(int, const std::shared_ptr<dist::ProcessGroup>&)>& body) {
  for (auto& e : run_thread_ranks(size, body))
    if (e) std::rethrow_exception(e);
}

/// The message of an exception: "" for null, what() of a std::exception, "unknown exception"
/// otherwise.
inline std::string exception_message(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace lockstep::testing
