// What every stand-in for a CUDA path throws in a build without LOCKSTEP_CUDA (the stubs
// src/ops/cuda_*stub.cpp): no cuda:k tensor can be made there, so this is never reached; should
// it be, it throws instead of touching memory.
#pragma once

#include <string>

#include "lockstep/core/error.h"

namespace lockstep::cuda_ops {

/// DeviceError naming `op` and the CMake option that builds the CUDA backend.
[[noreturn]] inline void not_built(const char* op) {
  throw DeviceError(std::string(op) +
                    ": CUDA tensors are not supported: this build has no CUDA backend (configure "
                    "with -DLOCKSTEP_CUDA=ON)");
}

}  // namespace lockstep::cuda_ops
