// Internal: the caching allocator's private pools of CUDA graphs (include/lockstep/cuda/graph.h,
// allocator.h). Used by src/cuda/graph.cpp only.
#pragma once

#include <cstdint>

namespace lockstep::cuda::detail {

/// A new pool id (never 0).
std::uint64_t new_graph_pool_id() noexcept;
/// From now on, blocks allocated on `device`, and blocks freed there, belong to pool `pool`
/// (a capture on the device began). CudaError when another pool is already capturing there.
void begin_allocate_to_pool(int device, std::uint64_t pool);
/// Allocations and frees on `device` go to the general cache again (the capture ended). The
/// pool keeps its blocks.
void end_allocate_to_pool(int device) noexcept;
/// The pool's free blocks go to the general cache; its blocks still in use go there when freed.
void release_pool(int device, std::uint64_t pool) noexcept;

}  // namespace lockstep::cuda::detail
