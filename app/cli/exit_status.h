// The exit statuses of `lockstep` and the two app-level outcomes that are not lockstep::Errors of
// the library: a training loss that became NaN/Inf, and an interruption by a signal.
//
//   0    success (also --help and --version)
//   1    anything else that went wrong (an internal error)
//   2    usage or data error: unknown flag or command, bad flag value, unreadable or malformed
//        file, model that does not fit the data, --init/--weights that do not fit the model,
//        unknown device (IoError, DataError, ValueError, StateDictError, DeviceError)
//   3    training stopped on a NaN/Inf loss, or eval's loss is NaN/Inf (NonFiniteLossError)
//   4    distributed failure: a collective failed or timed out (a rank died, hung or was
//        stopped; DistError, TimeoutError)
//   129  interrupted by SIGHUP, 130 by SIGINT, 143 by SIGTERM (128 + signal number)
#pragma once

#include <exception>
#include <string>

#include "lockstep/core/error.h"

namespace lockstep::app {

inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNonFiniteLoss = 3;
inline constexpr int kExitDistributed = 4;

/// The training loss of a batch was NaN or Inf; the message names the epoch and the step.
class NonFiniteLossError : public Error {
 public:
  using Error::Error;
};

/// Training stopped because of SIGINT/SIGTERM/SIGHUP after finishing its current step (and writing
/// a checkpoint when --checkpoint-dir is set); the message says where it stopped.
class Interrupted : public Error {
 public:
  Interrupted(int signal, const std::string& message) : Error(message), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

/// The exit status for an exception that ended a command (see the table above).
int exit_status_for(const std::exception& error);

}  // namespace lockstep::app
