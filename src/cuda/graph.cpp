// CUDA graphs (LOCKSTEP_CUDA=ON): lockstep::cuda::CUDAGraph, see include/lockstep/cuda/graph.h.
#include "lockstep/cuda/graph.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "lockstep/cuda/detail/check.h"
#include "cuda/graph_pool.h"

namespace lockstep::cuda {

namespace {


// The graph capturing each device's compute stream (set by capture_begin, cleared at its end).
std::mutex registry_mutex;
std::array<CUDAGraph*, kMaxDevices>& registry() {
  static std::array<CUDAGraph*, kMaxDevices> r{};
  return r;
}

void set_capturing(int device, CUDAGraph* graph) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry()[static_cast<std::size_t>(device)] = graph;
}

}  // namespace

bool is_current_stream_capturing(int device) noexcept {
  if (device < 0 || device >= kMaxDevices || device >= device_count()) return false;
  {
    // Without a Lockstep capture on the device the stream cannot be capturing (only
    // CUDAGraph::capture_begin starts one); this also avoids creating the stream here.
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (!registry()[static_cast<std::size_t>(device)]) return false;
  }
  try {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(compute_stream(device)), &status) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      return true;  // the query failed during a capture: treat it as one
    }
    return status != cudaStreamCaptureStatusNone;
  } catch (...) {
    return false;
  }
}

void check_not_capturing(int device, const std::string& op) {
  if (!is_current_stream_capturing(device)) return;
  throw CudaError(op +
                  " reads device memory back to the host, which CUDA graph capture does not "
                  "allow (" +
                  detail::device_name(device) +
                  "'s compute stream is being captured; the value would be read at capture "
                  "time, not at each replay)");
}

CUDAGraph* CUDAGraph::capturing_on(int device) noexcept {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry()[static_cast<std::size_t>(device)];
}

CUDAGraph::CUDAGraph() = default;

CUDAGraph::~CUDAGraph() {
  try {
    reset();
  } catch (...) {
  }
}

void CUDAGraph::capture_begin(int device) {
  check_device(device);
  if (capturing_ || exec_)
    throw CudaError("CUDAGraph::capture_begin on " + detail::device_name(device) +
                    ": this graph already holds a capture (call reset() first)");
  if (device >= kMaxDevices)
    throw CudaError("CUDAGraph::capture_begin: " + detail::device_name(device) +
                    " is beyond the devices Lockstep supports");
  if (capturing_on(device))
    throw CudaError("CUDAGraph::capture_begin: another capture is running on " +
                    detail::device_name(device));
  DeviceGuard guard(device);
  auto stream = static_cast<cudaStream_t>(compute_stream(device));
  const std::uint64_t pool = detail::new_graph_pool_id();
  detail::begin_allocate_to_pool(device, pool);
  device_ = device;
  pool_ = pool;
  set_capturing(device, this);
  const cudaError_t status = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  if (status != cudaSuccess) {
    set_capturing(device, nullptr);
    release_pool();
    detail::throw_cuda_error(status, device, "cudaStreamBeginCapture (compute stream)", __FILE__,
                             __LINE__);
  }
  capturing_ = true;
}

void CUDAGraph::capture_end() {
  if (!capturing_) throw CudaError("CUDAGraph::capture_end: no capture is running");
  DeviceGuard guard(device_);
  auto stream = static_cast<cudaStream_t>(compute_stream(device_));
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream, &graph);
  capturing_ = false;
  set_capturing(device_, nullptr);
  detail::end_allocate_to_pool(device_);
  if (status != cudaSuccess || !graph) {
    if (graph) (void)cudaGraphDestroy(graph);
    const int device = device_;
    reset();
    detail::throw_cuda_error(status != cudaSuccess ? status : cudaErrorStreamCaptureInvalidated,
                             device,
                             "cudaStreamEndCapture (the capture was invalidated: a CUDA call that "
                             "capture does not allow ran while it was recording)",
                             __FILE__, __LINE__);
  }
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  // AutoFreeOnLaunch, as PyTorch's CUDAGraph: a library may allocate inside the capture
  // (cudaMallocAsync, e.g. cuBLAS's workspace since CUDA 12.2) without freeing there; without
  // the flag every launch after the first would then fail (cudaGraphLaunch: "If any
  // allocations created by graphExec remain unfreed ... the launch will fail").
  const cudaError_t inst =
      cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  if (inst != cudaSuccess) {
    const int device = device_;
    reset();
    detail::throw_cuda_error(inst, device, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  exec_ = exec;
}

void CUDAGraph::abort_capture() noexcept {
  if (!capturing_) return;
  int previous = -1;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device_);
  cudaGraph_t graph = nullptr;
  try {
    (void)cudaStreamEndCapture(static_cast<cudaStream_t>(compute_stream(device_)), &graph);
  } catch (...) {
  }
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  capturing_ = false;
  set_capturing(device_, nullptr);
  detail::end_allocate_to_pool(device_);
  if (previous >= 0) (void)cudaSetDevice(previous);
  reset();
}

void CUDAGraph::replay() {
  if (!exec_) throw CudaError("CUDAGraph::replay: nothing has been captured");
  DeviceGuard guard(device_);
  LOCKSTEP_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                      static_cast<cudaStream_t>(compute_stream(device_))),
                      device_, "cudaGraphLaunch");
}

void CUDAGraph::check_replay() {
  if (!exec_) throw CudaError("CUDAGraph::check_replay: nothing has been captured");
  DeviceGuard guard(device_);
  LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(compute_stream(device_))),
                      device_, "cudaStreamSynchronize (after a CUDA graph replay)");
  for (const auto& check : checks_) check();
}

void CUDAGraph::reset() {
  if (capturing_) {
    abort_capture();  // calls reset() again once the capture is over
    return;
  }
  if (exec_ || graph_) {
    // The graph may still be running: its memory returns to the cache only after it finished.
    int previous = -1;
    (void)cudaGetDevice(&previous);
    (void)cudaSetDevice(device_);
    try {
      (void)cudaStreamSynchronize(static_cast<cudaStream_t>(compute_stream(device_)));
    } catch (...) {
    }
    if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
    (void)cudaGetLastError();
    if (previous >= 0) (void)cudaSetDevice(previous);
  }
  exec_ = nullptr;
  graph_ = nullptr;
  checks_.clear();
  kept_.clear();  // their blocks return to the pool, released next
  release_pool();
}

void CUDAGraph::release_pool() noexcept {
  if (pool_) detail::release_pool(device_, pool_);
  pool_ = 0;
}

void CUDAGraph::add_replay_check(std::function<void()> check) {
  checks_.push_back(std::move(check));
}

void CUDAGraph::keep_alive(std::shared_ptr<const void> object) {
  kept_.push_back(std::move(object));
}

}  // namespace lockstep::cuda
