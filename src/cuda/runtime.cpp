// lockstep::cuda runtime (LOCKSTEP_CUDA=ON): device discovery, compute streams, typed errors.
#include "lockstep/cuda/runtime.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/cuda/graph.h"

namespace lockstep::cuda {

namespace detail {

void throw_cuda_error(cudaError_t status, int device, const std::string& op, const char* file,
                      int line) {
  // A sticky error stays set; clear the non-sticky ones so the next call starts clean.
  (void)cudaGetLastError();
  throw CudaError("CUDA error on " + device_name(device) + " in " + op + ": " +
                      cudaGetErrorString(status) + " (" + cudaGetErrorName(status) + ") [" + file +
                      ":" + std::to_string(line) + "]",
                  static_cast<int>(status));
}

void throw_cublas_error(cublasStatus_t status, int device, const std::string& op,
                        const char* file, int line) {
  throw CublasError("cuBLAS error on " + device_name(device) + " in " + op + ": " +
                        cublasGetStatusString(status) + " (" + cublasGetStatusName(status) +
                        ") [" + file + ":" + std::to_string(line) + "]",
                    static_cast<int>(status));
}

int device_of(const void* ptr) noexcept {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return attr.device;
}

}  // namespace detail

namespace {

struct DeviceInfo {
  int count = 0;
  std::string reason;
};

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    int n = 0;
    cudaError_t status = cudaGetDeviceCount(&n);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      d.reason = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
      return d;
    }
    d.count = n;
    if (n == 0) d.reason = "cudaGetDeviceCount found 0 devices";
    return d;
  }();
  return info;
}


}  // namespace

int device_count() noexcept {
  try {
    return device_info().count;
  } catch (...) {  // std::string allocation only; device_count() promises not to throw
    return 0;
  }
}

bool is_available() noexcept { return device_count() > 0; }

std::string unavailable_reason() { return device_info().reason; }

void check_device(int device) {
  const int n = device_count();
  if (device >= 0 && device < n) return;
  std::string msg = "CUDA device " + detail::device_name(device) + " does not exist: " +
                    "device_count() = " + std::to_string(n);
  if (n == 0) msg += " (" + unavailable_reason() + ")";
  throw CudaError(msg, static_cast<int>(cudaErrorInvalidDevice));
}

void set_device(int device) {
  check_device(device);
  LOCKSTEP_CUDA_CHECK(cudaSetDevice(device), device, "cudaSetDevice");
}

int current_device() {
  int d = -1;
  LOCKSTEP_CUDA_CHECK(cudaGetDevice(&d), -1, "cudaGetDevice");
  return d;
}

Stream compute_stream(int device) {
  check_device(device);
  static std::mutex mutex;
  static std::array<cudaStream_t, kMaxDevices> streams{};
  if (device >= kMaxDevices)
    throw CudaError("compute_stream: " + detail::device_name(device) + " is beyond the " +
                    std::to_string(kMaxDevices) + " devices Lockstep supports");
  std::lock_guard<std::mutex> lock(mutex);
  if (!streams[device]) {
    DeviceGuard guard(device);
    cudaStream_t s = nullptr;
    LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), device,
                        "cudaStreamCreateWithFlags (compute stream)");
    streams[device] = s;
  }
  return streams[device];
}

void synchronize(int device) {
  check_not_capturing(device, "cuda::synchronize");
  DeviceGuard guard(device);
  LOCKSTEP_CUDA_CHECK(cudaDeviceSynchronize(), device, "cudaDeviceSynchronize");
}

DeviceProperties get_device_properties(int device) {
  check_device(device);
  cudaDeviceProp p{};
  LOCKSTEP_CUDA_CHECK(cudaGetDeviceProperties(&p, device), device, "cudaGetDeviceProperties");
  DeviceProperties out;
  out.name = p.name;
  out.total_memory = p.totalGlobalMem;
  out.major = p.major;
  out.minor = p.minor;
  out.multi_processor_count = p.multiProcessorCount;
  return out;
}

DeviceGuard::DeviceGuard(int device) {
  check_device(device);
  LOCKSTEP_CUDA_CHECK(cudaGetDevice(&previous_), device, "cudaGetDevice");
  if (previous_ != device) LOCKSTEP_CUDA_CHECK(cudaSetDevice(device), device, "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

}  // namespace lockstep::cuda
