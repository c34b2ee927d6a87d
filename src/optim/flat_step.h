// Internal: whether an optimizer's parameters can be updated by ONE kernel launch over a flat
// buffer, and the segment table of that launch. Pure host code over addresses and sizes (no
// tensor, no device), so it is tested without a GPU (tests/optim/flat_step_test.cpp); the
// optimizers (src/optim/optimizer_step.cpp) feed it their parameters and gradients on a GPU.
//
// A layout is flat when
//   - every parameter with elements is a view of ONE storage, no two of them overlap, and each
//     starts a whole number of elements from the lowest one (the parameter base);
//   - every such parameter that has a gradient this step has it in ONE other storage (not the
//     parameters'), a whole number of elements from the lowest of them (the gradient base).
// Gaps between parameters and any order of them are fine (each segment carries its own
// offsets), as are parameters without elements (their segment launches nothing) and parameters
// without a gradient (their segment is skipped: no update, no state, as on the CPU). This is
// how DataParallel lays out its master parameters and their reduced gradients (FlatBuffer views
// of one buffer, gradients views of the reducer's flat gradient buffer).
//
// The optimizer state of a flat step lives in flat buffers of state_numel elements with each
// parameter's state at its state_offset (optimizer order, back to back, no gaps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::optim::detail {

/// One optimizer parameter as the planner sees it: where its elements and its gradient's
/// elements are (byte addresses; a storage is identified by any pointer unique to it).
struct FlatParamInfo {
  const void* storage = nullptr;  ///< the parameter's storage
  std::uintptr_t address = 0;     ///< address of its first element
  std::int64_t numel = 0;
  bool has_grad = false;               ///< it has a gradient this step
  const void* grad_storage = nullptr;  ///< the gradient's storage (when has_grad)
  std::uintptr_t grad_address = 0;     ///< address of the gradient's first element
};

/// Parameter `index` (optimizer order) in a flat step; offsets are in elements.
struct FlatSegment {
  std::size_t index = 0;
  std::int64_t param_offset = 0;  ///< from the parameter base (0 for an empty parameter)
  std::int64_t grad_offset = 0;   ///< from the gradient base (0 without gradient or elements)
  std::int64_t state_offset = 0;  ///< into the flat state buffers
  std::int64_t numel = 0;
  bool has_grad = false;
};

inline constexpr std::size_t kNoBase = static_cast<std::size_t>(-1);

struct FlatPlan {
  bool flat = false;
  /// Why the layout is not flat (empty when it is), e.g. "parameters 0 and 2 lie in different
  /// storages".
  std::string reason;
  /// The parameter whose first element is the parameter base, and the one whose gradient's first
  /// element is the gradient base (kNoBase when no parameter has elements / a gradient with
  /// elements).
  std::size_t param_base_index = kNoBase;
  std::size_t grad_base_index = kNoBase;
  std::int64_t state_numel = 0;  ///< Σ numel: the length of each flat state buffer
  /// One per parameter, in optimizer order (segments[i].index == i).
  std::vector<FlatSegment> segments;
};

/// The flat plan of `params` (elements of `element_size` bytes, > 0), or flat == false with the
/// reason. Never throws for any input (an element_size of 0 is "not flat").
FlatPlan plan_flat_step(const std::vector<FlatParamInfo>& params, std::size_t element_size);

}  // namespace lockstep::optim::detail
