// The nccl group's host waits and failures: NCCL's error text, the NcclError thrown for a failed
// NCCL call, the host's wait for the NCCL stream with its timeout, and ncclCommAbort after a
// failure.
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "dist/nccl/nccl_group.h"

namespace lockstep::dist::nccl_detail {

std::string nccl_message(ncclResult_t status, ncclComm_t comm) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(comm);
  if (last && *last && text.find(last) == std::string::npos) text += " (" + std::string(last) + ")";
  return text;
}

// "NCCL error on cuda:1 (rank 1 of 2) in ncclAllReduce(float32, 1000 elements): unhandled cuda
// error (...) [src/dist/nccl/nccl_group.h:201]"
[[noreturn]] void throw_nccl(ncclResult_t status, ncclComm_t comm, const std::string& where,
                             const std::string& op, const char* file, int line) {
  throw NcclError("NCCL error on " + where + " in " + op + ": " + nccl_message(status, comm) +
                      " [" + file + ":" + std::to_string(line) + "]",
                  static_cast<int>(status));
}

// Waits on the host for the NCCL stream, watching NCCL's asynchronous error state, for at most
// options_.timeout_seconds; aborts the communicator and throws TimeoutError after that.
void NcclGroup::wait_host(const char* op) {
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      broken_ = true;
      broken_reason_ = std::string(op) + ": " + cudaGetErrorName(q);
      LOCKSTEP_CUDA_CHECK(q, device_, std::string("nccl ") + op + " (waiting for the NCCL stream)");
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      broken_ = true;
      broken_reason_ = std::string(op) + ": " + nccl_message(async, comm_);
      abort();
      throw_nccl(async, nullptr, where_, std::string("nccl ") + op, __FILE__, __LINE__);
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (std::isfinite(options_.timeout_seconds) && waited > options_.timeout_seconds) {
      broken_ = true;
      broken_reason_ = std::string(op) + " timed out";
      abort();
      throw TimeoutError("nccl " + std::string(op) + " timed out after " +
                         std::to_string(options_.timeout_seconds) + " s on " + where_ +
                         ": another rank did not enter it (hung, stopped or dead); the "
                         "communicator was aborted");
    }
    if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Aborts the communicator (ncclCommAbort) after a failure; the Clique then skips it.
void NcclGroup::abort() {
  if (!comm_) return;
  ncclCommAbort(comm_);
  comm_ = nullptr;
  if (clique_) clique_->comms[static_cast<std::size_t>(rank_)] = nullptr;
}

}  // namespace lockstep::dist::nccl_detail
