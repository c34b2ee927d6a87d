// CPU allocator with per-thread caches of freed blocks by size class, so that the buffers a
// training step allocates and frees every iteration (activations, gradients, GEMM outputs) are
// reused instead of going back to the system — large blocks would otherwise be mmapped and
// page-faulted afresh each step. Size classes are 2^k and 1.5·2^k bytes (≥ 64); each thread caches
// at most kThreadCacheBytes. Blocks of more than kMaxCachedBytes bypass the cache.
#include "core/allocator.h"

#include <bit>
#include <cstdlib>
#include <new>
#include <utility>

namespace lockstep::detail {

namespace {

constexpr std::size_t kMinBlock = 64;
constexpr std::size_t kMaxCachedBytes = std::size_t(1) << 28;     // 256 MiB
constexpr std::size_t kThreadCacheBytes = std::size_t(1) << 30;   // 1 GiB per thread
constexpr int kClasses = 64;

// Under AddressSanitizer / ThreadSanitizer every block goes back to malloc at once, so the
// sanitizers see each use after free and each reuse.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kCache = false;
#else
constexpr bool kCache = true;
#endif

// Class index and rounded size for n bytes.
std::pair<int, std::size_t> size_class(std::size_t n) {
  if (n <= kMinBlock) return {0, kMinBlock};
  int k = std::bit_width(n - 1);            // 2^(k-1) < n <= 2^k
  std::size_t pow = std::size_t(1) << k;
  std::size_t mid = (pow >> 2) * 3;         // 1.5 * 2^(k-1)
  int base = 2 * (k - 6);                   // k = 6 -> 64 bytes
  if (n <= mid) return {base - 1, mid};
  return {base, pow};
}

// Per-thread free lists, intrusive: a cached block's first word points to the next one. Plain
// data, so reaching it costs one TLS access and no initialisation guard.
struct ThreadCache {
  void* head[kClasses];
  std::size_t bytes;
  bool registered;  // the Cleaner below exists for this thread
  bool dead;        // the Cleaner ran (thread exit / static destruction): bypass the cache
};
thread_local ThreadCache t_cache{};

// Returns the cached blocks to the system when the thread ends.
struct Cleaner {
  ~Cleaner() {
    t_cache.dead = true;
    for (void*& head : t_cache.head)
      while (head) {
        void* next = *static_cast<void**>(head);
        std::free(head);
        head = next;
      }
  }
};

void register_cleaner() {
  thread_local Cleaner cleaner;
  (void)cleaner;
  t_cache.registered = true;
}

}  // namespace

void* cpu_allocate(std::size_t nbytes, std::size_t* capacity) {
  auto [cls, size] = size_class(nbytes);
  ThreadCache& c = t_cache;
  if (size <= kMaxCachedBytes) {
    if (void* p = kCache ? c.head[cls] : nullptr; p && !c.dead) {
      c.head[cls] = *static_cast<void**>(p);
      c.bytes -= size;
      *capacity = size;
      return p;
    }
  } else {
    size = (nbytes + 4095) / 4096 * 4096;
  }
  // aligned_alloc needs a multiple of the alignment (the 96-byte class is not; ASan rejects it)
  void* p = std::aligned_alloc(64, (size + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  *capacity = size;
  return p;
}

std::size_t cpu_block_size(std::size_t nbytes) {
  auto [cls, size] = size_class(nbytes);
  return size <= kMaxCachedBytes ? size : (nbytes + 4095) / 4096 * 4096;
}

void cpu_free(void* p, std::size_t capacity) {
  if (!p) return;
  ThreadCache& c = t_cache;
  if (kCache && capacity <= kMaxCachedBytes && !c.dead &&
      c.bytes + capacity <= kThreadCacheBytes) {
    if (!c.registered) register_cleaner();
    int cls = size_class(capacity).first;
    *static_cast<void**>(p) = c.head[cls];
    c.head[cls] = p;
    c.bytes += capacity;
    return;
  }
  std::free(p);
}

}  // namespace lockstep::detail
