// Caching device allocator and pinned staging (LOCKSTEP_CUDA=ON). See
// include/lockstep/cuda/allocator.h for the size classes and the stream rule.
#include "lockstep/cuda/allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lockstep/cuda/detail/check.h"
#include "cuda/graph_pool.h"
#include "lockstep/cuda/graph.h"

namespace lockstep::cuda {

namespace {

constexpr std::size_t kMinBlock = 512;
constexpr std::size_t kSmallLimit = std::size_t{1} << 20;  // 1 MiB
constexpr std::size_t kLargeRound = std::size_t{2} << 20;  // 2 MiB

using FreeLists = std::unordered_map<std::size_t, std::vector<void*>>;  // size class -> blocks

struct LiveBlock {
  std::size_t size = 0;
  std::uint64_t pool = 0;  // 0: the general cache; else the CUDA graph pool it belongs to
};

struct DeviceCache {
  std::mutex mutex;
  FreeLists free_blocks;                      // the general cache
  std::unordered_map<void*, LiveBlock> live;  // handed out
  // CUDA graph private pools (graph.h): their free blocks, and their bytes (free or in use).
  std::unordered_map<std::uint64_t, FreeLists> pool_free;
  std::unordered_map<std::uint64_t, std::int64_t> pool_bytes;
  std::uint64_t capturing_pool = 0;  // the pool of the capture running on this device (0: none)
  MemoryStats stats;

  // Caller holds mutex. A block of `size` from `lists`, or nullptr.
  static void* take(FreeLists& lists, std::size_t size) {
    auto it = lists.find(size);
    if (it == lists.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }

  // Caller holds mutex.
  void release_cached(int device) {
    DeviceGuard guard(device);
    for (auto& [size, blocks] : free_blocks) {
      // Each block leaves the list once freed, so a failing cudaFree leaves only live blocks.
      while (!blocks.empty()) {
        LOCKSTEP_CUDA_CHECK(cudaFree(blocks.back()), device,
                            "cudaFree(" + std::to_string(size) + " bytes)");
        blocks.pop_back();
        stats.cached_bytes -= static_cast<std::int64_t>(size);
        stats.reserved_bytes -= static_cast<std::int64_t>(size);
        ++stats.num_cuda_frees;
      }
    }
    free_blocks.clear();
  }
};

std::array<DeviceCache, kMaxDevices>& caches() {
  static auto* c = new std::array<DeviceCache, kMaxDevices>();  // outlives static destructors
  return *c;
}

// Which device owns a live pointer (for caching_allocator_delete).
std::mutex owner_mutex;
std::unordered_map<void*, int>& owners() {
  static auto* m = new std::unordered_map<void*, int>();
  return *m;
}

std::string stats_text(const MemoryStats& s) {
  return "allocated " + std::to_string(s.allocated_bytes) + " B, cached " +
         std::to_string(s.cached_bytes) + " B, reserved " + std::to_string(s.reserved_bytes) +
         " B";
}

DeviceCache& cache_of(int device) {
  check_device(device);
  if (device >= kMaxDevices)
    throw CudaError("caching allocator: " + detail::device_name(device) + " is beyond the " +
                    std::to_string(kMaxDevices) + " devices Lockstep supports");
  return caches()[static_cast<std::size_t>(device)];
}

}  // namespace

std::size_t round_size(std::size_t bytes) noexcept {
  if (bytes == 0) return 0;
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes <= kSmallLimit) return std::bit_ceil(bytes);
  return (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

void* caching_allocator_alloc(std::size_t bytes, int device) {
  if (bytes == 0) {
    check_device(device);
    return nullptr;
  }
  DeviceCache& c = cache_of(device);
  const std::size_t size = round_size(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    const std::uint64_t pool = c.capturing_pool;
    // During a capture: the pool's own free blocks first (blocks freed earlier in the same
    // capture), then the general cache (the block joins the pool), then cudaMalloc.
    bool joins_pool = pool != 0;  // false when the block is the pool's already
    if (pool) {
      p = DeviceCache::take(c.pool_free[pool], size);
      joins_pool = p == nullptr;
    }
    if (!p) p = DeviceCache::take(c.free_blocks, size);
    if (p) {
      c.stats.cached_bytes -= static_cast<std::int64_t>(size);
    } else {
      DeviceGuard guard(device);
      // During a capture (global mode) cudaMalloc would invalidate it: this thread is relaxed
      // for the call, as PyTorch's allocator does. The block is not stream work; it stays in the
      // graph's pool, so the graph never depends on the allocation being repeated.
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      if (pool) (void)cudaThreadExchangeStreamCaptureMode(&mode);
      cudaError_t status = cudaMalloc(&p, size);
      // Give CUDA back what we hold, then try once more; not during a capture, where cudaFree
      // (which synchronizes the device) would invalidate it: the out-of-memory error instead.
      if (status == cudaErrorMemoryAllocation && !pool) {
        (void)cudaGetLastError();
        c.release_cached(device);
        status = cudaMalloc(&p, size);
      }
      if (pool) (void)cudaThreadExchangeStreamCaptureMode(&mode);
      if (status != cudaSuccess) {
        detail::throw_cuda_error(status, device,
                                 "cudaMalloc(" + std::to_string(size) + " bytes; allocator: " +
                                     stats_text(c.stats) + ")",
                                 __FILE__, __LINE__);
      }
      ++c.stats.num_cuda_mallocs;
      c.stats.reserved_bytes += static_cast<std::int64_t>(size);
    }
    c.live.emplace(p, LiveBlock{size, pool});
    if (joins_pool) c.pool_bytes[pool] += static_cast<std::int64_t>(size);
    c.stats.allocated_bytes += static_cast<std::int64_t>(size);
    c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
    ++c.stats.num_allocs;
  }
  std::lock_guard<std::mutex> lock(owner_mutex);
  owners()[p] = device;
  return p;
}

void caching_allocator_delete(void* ptr) {
  if (!ptr) return;
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(owner_mutex);
    auto it = owners().find(ptr);
    if (it == owners().end())
      throw CudaError("caching_allocator_delete: pointer " +
                      std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) +
                      " was not allocated by the caching allocator (or was freed twice)");
    device = it->second;
    owners().erase(it);
  }
  DeviceCache& c = caches()[static_cast<std::size_t>(device)];
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.live.find(ptr);
  const std::size_t size = it->second.size;
  std::uint64_t pool = it->second.pool;
  c.live.erase(it);
  // A block freed while a capture runs on its device joins that capture's pool (the graph may
  // have read it earlier in the capture); a pool block goes back to its pool while that exists.
  if (!pool && c.capturing_pool) {
    pool = c.capturing_pool;
    c.pool_bytes[pool] += static_cast<std::int64_t>(size);
  }
  if (pool)
    c.pool_free[pool][size].push_back(ptr);
  else
    c.free_blocks[size].push_back(ptr);
  c.stats.allocated_bytes -= static_cast<std::int64_t>(size);
  c.stats.cached_bytes += static_cast<std::int64_t>(size);
}

void empty_cache() {
  const int n = std::min(device_count(), kMaxDevices);
  for (int d = 0; d < n; ++d) {
    DeviceCache& c = caches()[static_cast<std::size_t>(d)];
    std::lock_guard<std::mutex> lock(c.mutex);
    // Not while a capture runs on the device (cudaFree would invalidate it): kept for later.
    if (!c.free_blocks.empty() && !c.capturing_pool) c.release_cached(d);
  }
}

MemoryStats memory_stats(int device) {
  if (device < 0 || device >= std::min(device_count(), kMaxDevices)) return {};
  DeviceCache& c = caches()[static_cast<std::size_t>(device)];
  std::lock_guard<std::mutex> lock(c.mutex);
  MemoryStats s = c.stats;
  for (const auto& [pool, bytes] : c.pool_bytes) s.graph_pool_bytes += bytes;
  return s;
}

// ---- CUDA graph pools (src/cuda/graph_pool.h) --------------------------------------------------

namespace detail {

std::uint64_t new_graph_pool_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

void begin_allocate_to_pool(int device, std::uint64_t pool) {
  DeviceCache& c = cache_of(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.capturing_pool)
    throw CudaError("CUDAGraph::capture_begin: a capture is already running on " +
                    device_name(device));
  c.capturing_pool = pool;
  c.pool_bytes.emplace(pool, 0);
}

void end_allocate_to_pool(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return;
  DeviceCache& c = caches()[static_cast<std::size_t>(device)];
  std::lock_guard<std::mutex> lock(c.mutex);
  c.capturing_pool = 0;
}

void release_pool(int device, std::uint64_t pool) noexcept {
  if (device < 0 || device >= kMaxDevices || pool == 0) return;
  DeviceCache& c = caches()[static_cast<std::size_t>(device)];
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.capturing_pool == pool) c.capturing_pool = 0;
  if (auto it = c.pool_free.find(pool); it != c.pool_free.end()) {
    for (auto& [size, blocks] : it->second)
      for (void* p : blocks) c.free_blocks[size].push_back(p);
    c.pool_free.erase(it);
  }
  for (auto& [p, block] : c.live)
    if (block.pool == pool) block.pool = 0;
  c.pool_bytes.erase(pool);
}

}  // namespace detail

void reset_peak_memory_stats(int device) {
  DeviceCache& c = cache_of(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
}

// ---- DeviceBuffer ------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device)
    : ptr_(caching_allocator_alloc(bytes, device)), bytes_(bytes), device_(device) {}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) caching_allocator_delete(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      device_(std::exchange(o.device_, -1)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) caching_allocator_delete(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = std::exchange(o.device_, -1);
  }
  return *this;
}

// ---- pinned staging ----------------------------------------------------------------------------

PinnedStagingBuffer::PinnedStagingBuffer(std::size_t bytes) { reserve(bytes); }

PinnedStagingBuffer::~PinnedStagingBuffer() {
  if (event_) {
    (void)cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  }
  if (ptr_) (void)cudaFreeHost(ptr_);
}

void PinnedStagingBuffer::wait() {
  if (event_)
    LOCKSTEP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), event_device_,
                        "cudaEventSynchronize (pinned staging upload)");
}

void PinnedStagingBuffer::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return;
  wait();
  if (ptr_) {
    LOCKSTEP_CUDA_CHECK(cudaFreeHost(ptr_), -1, "cudaFreeHost");
    ptr_ = nullptr;
    capacity_ = 0;
  }
  LOCKSTEP_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, cudaHostAllocPortable), -1,
                      "cudaHostAlloc(" + std::to_string(bytes) + " bytes, pinned staging)");
  capacity_ = bytes;
}

void PinnedStagingBuffer::upload(void* dst, const void* src, std::size_t bytes, int device) {
  if (bytes == 0) return;
  // A captured copy would re-read the pinned buffer at every replay, long after it was reused.
  if (is_current_stream_capturing(device))
    throw CudaError("an upload of " + std::to_string(bytes) + " bytes to " +
                    detail::device_name(device) +
                    " through the pinned staging buffer copies host memory, which CUDA graph "
                    "capture does not allow (a replay would re-read the reused buffer); copy into "
                    "the graph's static input tensors before replay() instead");
  reserve(bytes);
  wait();  // the previous upload has left the buffer
  std::copy_n(static_cast<const unsigned char*>(src), bytes, static_cast<unsigned char*>(ptr_));
  DeviceGuard guard(device);
  Stream s = compute_stream(device);
  if (event_ && event_device_ != device) {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = nullptr;
  }
  if (!event_) {
    cudaEvent_t e = nullptr;
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), device,
                        "cudaEventCreateWithFlags");
    event_ = e;
    event_device_ = device;
  }
  LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(dst, ptr_, bytes, cudaMemcpyHostToDevice, s), device,
                      "cudaMemcpyAsync(" + std::to_string(bytes) + " bytes, host to device)");
  LOCKSTEP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), s), device,
                      "cudaEventRecord");
}

namespace {
// One synchronous copy on the device's compute stream (ordered after the work queued there).
void copy_sync(void* dst, const void* src, std::size_t bytes, int device, cudaMemcpyKind kind,
               const char* direction) {
  if (bytes == 0) return;
  if (kind == cudaMemcpyDeviceToHost)
    check_not_capturing(device, std::string("a synchronous copy (") + direction + ")");
  else if (is_current_stream_capturing(device))
    throw CudaError(std::string("a synchronous copy (") + direction + ") to " +
                    detail::device_name(device) +
                    " waits for the device on the host, which CUDA graph capture does not allow; "
                    "copy into the graph's static input tensors before replay() instead");
  DeviceGuard guard(device);
  Stream s = compute_stream(device);
  LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s), device,
                      "cudaMemcpyAsync(" + std::to_string(bytes) + " bytes, " + direction + ")");
  LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(s), device, "cudaStreamSynchronize");
}
}  // namespace

void copy_to_device(void* dst, const void* src, std::size_t bytes, int device) {
  copy_sync(dst, src, bytes, device, cudaMemcpyHostToDevice, "host to device");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, int device) {
  copy_sync(dst, src, bytes, device, cudaMemcpyDeviceToHost, "device to host");
}

}  // namespace lockstep::cuda
