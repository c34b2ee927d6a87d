// lockstep::cuda in a build without CUDA (LOCKSTEP_CUDA=OFF): no devices, the reason says so,
// and everything that needs a device throws CudaError. Callers need no #ifdef.
#include "lockstep/core/error.h"
#include "lockstep/cuda/allocator.h"
#include "lockstep/cuda/runtime.h"

namespace lockstep::cuda {

namespace {
constexpr const char* kNotBuilt =
    "this build has no CUDA backend (configure with -DLOCKSTEP_CUDA=ON and the CUDA toolkit)";

[[noreturn]] void not_built(const std::string& what) {
  throw CudaError(what + ": " + kNotBuilt);
}
std::string name(int device) { return "cuda:" + std::to_string(device); }
}  // namespace

int device_count() noexcept { return 0; }
bool is_available() noexcept { return false; }
std::string unavailable_reason() { return kNotBuilt; }
void check_device(int device) {
  not_built("CUDA device " + name(device) + " does not exist: device_count() = 0");
}
void set_device(int device) { check_device(device); }
int current_device() { not_built("current_device"); }
Stream compute_stream(int device) { check_device(device); return nullptr; }
void synchronize(int device) { check_device(device); }
DeviceProperties get_device_properties(int device) { check_device(device); return {}; }
DeviceGuard::DeviceGuard(int device) { check_device(device); }
DeviceGuard::~DeviceGuard() = default;

std::size_t round_size(std::size_t bytes) noexcept { return bytes; }
void* caching_allocator_alloc(std::size_t bytes, int device) { check_device(device); return nullptr; }
void caching_allocator_delete(void* ptr) {
  if (ptr) not_built("caching_allocator_delete");
}
void empty_cache() {}
MemoryStats memory_stats(int) { return {}; }
void reset_peak_memory_stats(int device) { check_device(device); }

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) { check_device(device); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept { return *this; }

PinnedStagingBuffer::PinnedStagingBuffer(std::size_t bytes) { reserve(bytes); }
PinnedStagingBuffer::~PinnedStagingBuffer() = default;
void PinnedStagingBuffer::reserve(std::size_t bytes) {
  if (bytes > 0) not_built("PinnedStagingBuffer");
}
void PinnedStagingBuffer::upload(void*, const void*, std::size_t, int device) { check_device(device); }
void PinnedStagingBuffer::wait() {}

void copy_to_device(void*, const void*, std::size_t, int device) { check_device(device); }
void copy_to_host(void*, const void*, std::size_t, int device) { check_device(device); }

}  // namespace lockstep::cuda

// ---- CUDA graphs (graph.h) ---------------------------------------------------------------------

#include "lockstep/cuda/graph.h"

namespace lockstep::cuda {

bool is_current_stream_capturing(int) noexcept { return false; }
void check_not_capturing(int, const std::string&) {}

CUDAGraph::CUDAGraph() = default;
CUDAGraph::~CUDAGraph() = default;
void CUDAGraph::capture_begin(int device) {
  not_built("CUDAGraph::capture_begin(cuda:" + std::to_string(device) + ")");
}
void CUDAGraph::capture_end() { not_built("CUDAGraph::capture_end"); }
void CUDAGraph::abort_capture() noexcept {}
void CUDAGraph::replay() { not_built("CUDAGraph::replay"); }
void CUDAGraph::check_replay() { not_built("CUDAGraph::check_replay"); }
void CUDAGraph::reset() {
  checks_.clear();
  kept_.clear();
}
void CUDAGraph::release_pool() noexcept {}
void CUDAGraph::add_replay_check(std::function<void()> check) {
  checks_.push_back(std::move(check));
}
void CUDAGraph::keep_alive(std::shared_ptr<const void> object) {
  kept_.push_back(std::move(object));
}
CUDAGraph* CUDAGraph::capturing_on(int) noexcept { return nullptr; }

}  // namespace lockstep::cuda
