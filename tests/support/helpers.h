// Small helpers shared by several test executables.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
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

}  // namespace lockstep::testing
