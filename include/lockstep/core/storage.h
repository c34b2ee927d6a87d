// Storage: one 64-byte-aligned allocation owned by one or more tensors (views share it).
#pragma once

#include <cstddef>
#include <memory>

#include "lockstep/core/device.h"

namespace lockstep {

class Storage {
 public:
  /// Allocates `nbytes` (uninitialised) on `device`: host memory for cpu:k, a block of the CUDA
  /// caching allocator (lockstep/cuda/allocator.h) for cuda:k, given back to it on destruction.
  /// Throws DeviceError for an unavailable device, std::bad_alloc when host memory runs out,
  /// CudaError when device memory does.
  Storage(std::size_t nbytes, Device device);
  /// The memory of `base` seen as a storage of another CPU device of this process: every cpu:k
  /// device is the same RAM, so DataParallel's CPU replicas read the master parameters through
  /// such an alias instead of a copy. Keeps `base` alive and frees nothing. DeviceError unless
  /// `base` and `device` are both CPU devices.
  Storage(std::shared_ptr<Storage> base, Device device);
  /// Memory that something else owns, seen as a storage of the CPU device `device` (zero-copy
  /// from another library: a NumPy array, a DLPack producer — the Python front's from_numpy and
  /// from_dlpack). `owner` is kept alive as long as this storage and frees the memory when it
  /// goes; this storage frees nothing. `data` need not be aligned. DeviceError unless `device` is
  /// a CPU device.
  Storage(void* data, std::size_t nbytes, Device device, std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  /// Host memory for a CPU device, device memory for cuda:k (see Tensor::data_ptr).
  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::size_t capacity_ = 0;
  Device device_;
  std::shared_ptr<const void> owner_;  // set for an alias or borrowed memory: the owner of data_
};

}  // namespace lockstep
