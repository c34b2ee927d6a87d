// The CUDA runtime as Lockstep uses it: which devices exist, one compute stream per device, and
// typed errors (CudaError, include/lockstep/core/error.h). Names follow torch.cuda
// (is_available, device_count, synchronize, current_stream).
//
// This header and its functions exist in every build. In a build without CUDA
// (LOCKSTEP_CUDA=OFF) is_available() is false, device_count() is 0, unavailable_reason() says
// that the backend was not built, and the functions that need a device throw CudaError. No
// CUDA header is included here: Stream is the same type as cudaStream_t (a CUstream_st*).
//
// Stream rule: every kernel and every allocation of Lockstep on device k is ordered on
// compute_stream(k), a non-blocking stream created on first use that lives until exit. Work on
// that stream runs in issue order, which is what makes the caching allocator's immediate reuse
// of freed blocks safe (see allocator.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;  // cudaStream_t is `CUstream_st*` (<driver_types.h>)

namespace lockstep::cuda {

/// A CUDA stream handle, interchangeable with cudaStream_t. nullptr is the legacy default stream.
using Stream = CUstream_st*;

/// Number of CUDA devices this process can use (honours CUDA_VISIBLE_DEVICES). Never throws: 0
/// when the build has no CUDA, when no driver is loaded or no GPU is present (the reason is kept
/// for unavailable_reason()). torch.cuda.device_count.
int device_count() noexcept;

/// device_count() > 0. torch.cuda.is_available.
bool is_available() noexcept;

/// Why device_count() is 0, in words, for skip messages and errors: "this build has no CUDA
/// backend (configure with -DLOCKSTEP_CUDA=ON)", or CUDA's own error from cudaGetDeviceCount
/// (e.g. "cudaErrorNoDevice: no CUDA-capable device is detected"). Empty when a device exists.
std::string unavailable_reason();

/// Throws CudaError naming "cuda:<device>" unless 0 <= device < device_count(); the message
/// includes device_count() and, when it is 0, unavailable_reason().
void check_device(int device);

/// Makes `device` current on the calling thread (cudaSetDevice). CudaError on failure.
void set_device(int device);

/// The calling thread's current device (cudaGetDevice). CudaError on failure.
int current_device();

/// The compute stream of `device`: created on first use (cudaStreamNonBlocking), the same for
/// every thread, never destroyed. CudaError for a device that does not exist.
Stream compute_stream(int device);

/// Blocks until all work on `device` has finished (cudaDeviceSynchronize on it); a failure of
/// earlier asynchronous work surfaces here as CudaError naming the device.
/// torch.cuda.synchronize.
void synchronize(int device);

/// The few device properties Lockstep reports (cudaGetDeviceProperties).
struct DeviceProperties {
  std::string name;              ///< e.g. "NVIDIA H200"
  std::size_t total_memory = 0;  ///< bytes
  int major = 0, minor = 0;      ///< compute capability
  int multi_processor_count = 0;
};

/// torch.cuda.get_device_properties. CudaError for a device that does not exist.
DeviceProperties get_device_properties(int device);

/// Restores the calling thread's current device when it goes out of scope (torch.cuda.device).
/// Without CUDA it does nothing.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  [[maybe_unused]] int previous_ = -1;  // unused in a build without CUDA
};

}  // namespace lockstep::cuda
