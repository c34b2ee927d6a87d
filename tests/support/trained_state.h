// What a training run leaves, compared bit for bit with another run's: every parameter, every
// .grad (an undefined one stays undefined), the optimizer's state_dict. Used by the tests that
// promise bit-identical results (tests/parallel/comm_overlap_test.cpp, zero_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace lockstep::testing {

struct TrainedState {
  std::vector<Tensor> params, grads;
  StateDict state;
};

/// Copies of m's parameters and gradients, and opt's state_dict.
inline TrainedState trained_state(nn::Module& m, const optim::Optimizer& opt) {
  TrainedState r;
  for (auto& p : m.parameters()) {
    r.params.push_back(p.detach().clone());
    r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  }
  r.state = opt.state_dict();
  return r;
}

/// Test failures (naming `what` and the parameter or state key) wherever a and b differ.
inline void expect_bit_equal(const TrainedState& a, const TrainedState& b,
                             const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(BitEqual(a.params[i], b.params[i])) << what << ": parameter " << i;
    ASSERT_EQ(a.grads[i].defined(), b.grads[i].defined()) << what << ": grad " << i;
    if (a.grads[i].defined())
      EXPECT_TRUE(BitEqual(a.grads[i], b.grads[i])) << what << ": grad " << i;
  }
  ASSERT_EQ(a.state.size(), b.state.size()) << what;
  for (const auto& [key, value] : a.state) {
    const Tensor* other = b.state.find(key);
    ASSERT_NE(other, nullptr) << what << ": state " << key;
    EXPECT_TRUE(BitEqual(value, *other)) << what << ": state " << key;
  }
}

}  // namespace lockstep::testing
