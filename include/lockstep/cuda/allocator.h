// Caching device allocator and pinned host staging (PyTorch's CUDACachingAllocator in spirit,
// much simpler). Names follow torch.cuda: memory_stats, empty_cache,
// caching_allocator_alloc / caching_allocator_delete.
//
// Size classes: a request of n bytes gets a block of round_size(n) bytes: the next power of two
// from 512 B up to 1 MiB, above that the next multiple of 2 MiB. Freed blocks go back to a free
// list of their device and size class and are handed out again for the next request of that
// class without calling cudaMalloc; only empty_cache() (or an out-of-memory retry) returns them
// to CUDA with cudaFree.
//
// Stream rule (what makes immediate reuse safe): a block is used only by work ordered on its
// device's compute_stream() (runtime.h). Freeing a block while kernels that use it are still
// queued is then fine: the next user of the block is queued on the same stream, after them.
// Work on any other stream (e.g. an NCCL stream) that touches a block must be made to finish, or
// the compute stream must wait for it (an event), before the block is freed.
//
// CUDA graphs (graph.h): while a capture runs on a device, the blocks allocated there come from
// (and the blocks freed there go to) that graph's private pool: its own free blocks first, then
// the general cache's (the block joins the pool), then cudaMalloc (with this thread's capture mode
// relaxed for the call, as PyTorch's allocator does). A pool block freed after the capture goes
// back to the pool, which only its own capture draws from, so no code outside the graph reuses
// memory that a replay writes. CUDAGraph::reset() moves the pool's free blocks to the general
// cache; its blocks still in use go there when freed. empty_cache() frees the general cache only.
//
// Thread-safe (one mutex per device). Without CUDA, allocations throw CudaError and the
// statistics are all zero.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lockstep/cuda/runtime.h"

namespace lockstep::cuda {

/// Statistics of one device's caching allocator; all byte counts are of rounded block sizes.
struct MemoryStats {
  std::int64_t allocated_bytes = 0;       ///< bytes in blocks handed out and not yet freed
  std::int64_t peak_allocated_bytes = 0;  ///< the largest allocated_bytes seen (reset_peak_memory_stats)
  std::int64_t cached_bytes = 0;          ///< bytes in freed blocks kept for reuse
  std::int64_t reserved_bytes = 0;        ///< allocated + cached: what CUDA has given us
  std::int64_t num_allocs = 0;            ///< caching_allocator_alloc calls that returned a block
  std::int64_t num_cuda_mallocs = 0;      ///< cudaMalloc calls (misses of the cache)
  std::int64_t num_cuda_frees = 0;        ///< cudaFree calls (empty_cache, out-of-memory retries)
  /// Bytes in blocks owned by CUDA graphs' private pools (in use or free; part of the counts
  /// above): they are reused only by their own capture and return to the general cache when the
  /// graph is reset or destroyed (graph.h).
  std::int64_t graph_pool_bytes = 0;
};

/// The block size a request of `bytes` is served with (see the size classes above); 0 for 0.
std::size_t round_size(std::size_t bytes) noexcept;

/// A block of at least `bytes` bytes on `device`, from the cache when one of its size class is
/// free, else from cudaMalloc (on out of memory: empty this device's cache and retry once).
/// bytes == 0 returns nullptr. Throws CudaError naming the device, the byte count and the
/// allocator's statistics when CUDA has no memory left, or for a device that does not exist.
void* caching_allocator_alloc(std::size_t bytes, int device);

/// Returns a block from caching_allocator_alloc to its device's cache (nullptr is ignored).
/// Throws CudaError for a pointer this allocator did not hand out (or already took back).
void caching_allocator_delete(void* ptr);

/// Frees every cached (unused) block of every device with cudaFree. Blocks in use stay.
/// torch.cuda.empty_cache.
void empty_cache();

/// Statistics of `device`'s allocator (zeros for a device never used, or without CUDA).
/// torch.cuda.memory_stats (fewer keys, as a struct).
MemoryStats memory_stats(int device);

/// Sets peak_allocated_bytes to the current allocated_bytes. torch.cuda.reset_peak_memory_stats.
void reset_peak_memory_stats(int device);

/// A device block owned by one object: caching_allocator_alloc on construction,
/// caching_allocator_delete on destruction. Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t size() const { return bytes_; }  ///< bytes requested (the block may be larger)
  int device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
};

/// Page-locked host memory (cudaHostAlloc, portable) for batch uploads: copies from it to a
/// device run asynchronously on the compute stream. Grows on demand, never shrinks; not
/// thread-safe (one per loader thread).
class PinnedStagingBuffer {
 public:
  PinnedStagingBuffer() = default;
  explicit PinnedStagingBuffer(std::size_t bytes);
  ~PinnedStagingBuffer();
  PinnedStagingBuffer(const PinnedStagingBuffer&) = delete;
  PinnedStagingBuffer& operator=(const PinnedStagingBuffer&) = delete;

  /// Makes the buffer at least `bytes` long (reallocates; waits for pending uploads first).
  /// CudaError when pinned memory cannot be allocated.
  void reserve(std::size_t bytes);
  void* data() const { return ptr_; }
  std::size_t capacity() const { return capacity_; }

  /// Copies `bytes` from host memory `src` into the pinned buffer, then enqueues the copy to
  /// `dst` on `device`'s compute stream (cudaMemcpyAsync) and records an event. The buffer is
  /// reused only after that event (the next upload() or reserve() waits for it), so the caller
  /// may overwrite `src` at once; `dst` is valid for kernels on the compute stream. CudaError on
  /// failure, naming the device and the byte count.
  void upload(void* dst, const void* src, std::size_t bytes, int device);

  /// Waits until the last upload has left the pinned buffer.
  void wait();

 private:
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
  [[maybe_unused]] void* event_ = nullptr;  // cudaEvent_t of the last upload (unused without CUDA)
  [[maybe_unused]] int event_device_ = -1;
};

/// Synchronous copies for tests and checkpoints (on the compute stream, then waits for it).
/// CudaError naming the device on failure.
void copy_to_device(void* dst, const void* src, std::size_t bytes, int device);
void copy_to_host(void* dst, const void* src, std::size_t bytes, int device);

}  // namespace lockstep::cuda
