// Typed errors thrown by Lockstep. Every message names the shapes, dtypes, devices, files or
// keys involved, so a caller can tell what went wrong without a debugger.
#pragma once

#include <stdexcept>
#include <string>

namespace lockstep {

/// Base class of every error Lockstep throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Tensor shapes that do not fit the operation (e.g. matmul [2,3] x [4,5]).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A dtype the operation does not accept, or two inputs of different dtypes.
class DTypeError : public Error {
 public:
  using Error::Error;
};

/// An unparsable device string, an unavailable backend, or inputs on different devices.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// An index outside its valid range (a class label outside [0, C), index_select out of range).
class IndexError : public Error {
 public:
  using Error::Error;
};

/// An argument value outside its domain (negative learning rate, dropout p outside [0, 1)).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// A state_dict with missing or unexpected keys, or a tensor of the wrong shape.
class StateDictError : public Error {
 public:
  using Error::Error;
};

/// Misuse of autograd (backward on a non-scalar, backward twice through a freed graph).
class AutogradError : public Error {
 public:
  using Error::Error;
};

/// A file that cannot be opened, read, written or renamed (missing, a directory, no permission,
/// disk full). The message names the path and the system's reason.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A file whose contents are malformed: wrong magic or dimensions, truncated or corrupt data, a
/// ragged CSV row, a non-numeric/NaN/Inf value, a label that is negative, fractional or out of
/// range. The message names the file and, for text formats, the line (1-based).
class DataError : public Error {
 public:
  using Error::Error;
};

/// A CUDA runtime call or kernel launch that failed, or a CUDA device that does not exist or is
/// not usable in this build. The message names the device ("cuda:1"), the operation
/// ("cudaMalloc(4096 bytes)", "kernel relu_forward") and CUDA's own error string; code() is the
/// cudaError_t value (0 when the failure did not come from a CUDA call, e.g. "not built").
/// Thrown by lockstep::cuda (include/lockstep/cuda/) and the CUDA kernels.
class CudaError : public DeviceError {
 public:
  explicit CudaError(const std::string& message, int code = 0) : DeviceError(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

/// A cuBLAS / cuBLASLt call that failed; code() is the cublasStatus_t value.
class CublasError : public CudaError {
 public:
  using CudaError::CudaError;
};

/// A collective or peer failure in distributed training: a rank that died or cannot be reached,
/// an MPI/NCCL call that failed, ranks that disagree on a collective. The message names the
/// operation, this rank and, where known, the failed rank.
class DistError : public Error {
 public:
  using Error::Error;
};

/// An NCCL call that failed (a communicator that cannot be created, a collective that returned
/// an error); the message names the device, the operation and NCCL's error string.
class NcclError : public DistError {
 public:
  explicit NcclError(const std::string& message, int code = 0) : DistError(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

/// A collective that waited longer than the process group's timeout (a rank hung, was stopped or
/// died without the launcher noticing). The message names the operation, the timeout and, where
/// a roll call could tell, the ranks that did not answer.
class TimeoutError : public DistError {
 public:
  using DistError::DistError;
};

/// Another rank failed and said so before it left (dist::notify_failure): the message is
/// "rank R failed: <its error>"; status() is the exit status that rank leaves with, so a
/// command-line job can end every rank with the same status.
class PeerFailedError : public DistError {
 public:
  PeerFailedError(const std::string& message, int rank, int status)
      : DistError(message), rank_(rank), status_(status) {}
  int rank() const { return rank_; }
  int status() const { return status_; }

 private:
  int rank_;
  int status_;
};

}  // namespace lockstep
