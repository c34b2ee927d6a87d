// PoolAllocator: a std allocator over Lockstep's per-thread block cache, for the small objects
// every op creates (tensor handles, storages, autograd nodes) — std::allocate_shared with it
// avoids a trip through malloc/free per object.
#pragma once

#include <cstddef>

namespace lockstep::detail {

void* cpu_allocate(std::size_t nbytes, std::size_t* capacity);
void cpu_free(void* p, std::size_t capacity);
/// Block capacity cpu_allocate returns for `nbytes`.
std::size_t cpu_block_size(std::size_t nbytes);

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    std::size_t cap = 0;
    return static_cast<T*>(cpu_allocate(n * sizeof(T), &cap));
  }
  void deallocate(T* p, std::size_t n) { cpu_free(p, cpu_block_size(n * sizeof(T))); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

}  // namespace lockstep::detail
