// CUDA graphs: record the work a piece of code enqueues on a device's compute stream once, then
// launch all of it again with one call (torch.cuda.CUDAGraph; CUDA Programming Guide, "CUDA
// Graphs" / "Creating a Graph Using Stream Capture").
//
//   cuda::CUDAGraph g;
//   g.capture_begin(0);        // cudaStreamBeginCapture on compute_stream(0)
//   ... ops on cuda:0 tensors ...   // recorded, not run
//   g.capture_end();           // cudaStreamEndCapture + cudaGraphInstantiate
//   g.replay();                // cudaGraphLaunch on compute_stream(0): the recorded work again
//
// What a replay does: exactly the kernels, copies and NCCL calls that were enqueued on the
// capturing stream during capture (also those enqueued from other threads, e.g. DataParallel's
// device workers, and the work of streams forked from it by an event and joined back, as the
// NCCL group's stream is), with the same arguments and the same device addresses. Nothing of the
// host code runs again: host values computed during capture (sizes, scalars passed to kernels)
// are frozen into the graph, and tensors the graph reads must keep their addresses: refill them
// in place (copy_) between replays ("static" inputs, as in PyTorch).
//
// Capture mode: cudaStreamCaptureModeGlobal (PyTorch's default): a potentially unsafe CUDA call
// (cudaMalloc, a synchronous copy, ...) made by ANY thread while the capture runs invalidates it,
// so such mistakes surface at capture_end() as a CudaError instead of producing a wrong graph. The
// caching allocator (allocator.h) switches its own thread to cudaStreamCaptureModeRelaxed around
// its cudaMalloc, as PyTorch's allocator does: an allocation is not stream work and the graph
// does not depend on it being repeated, the block simply keeps belonging to the graph's private
// memory pool (see allocator.h). Host reads of device memory during a capture (Tensor::item(),
// to(cpu()), cuda::synchronize, copies through the pinned staging buffer) are refused by Lockstep
// before they reach CUDA, with a CudaError saying "<op> reads device memory back to the host,
// which CUDA graph capture does not allow" (or the upload's counterpart).
//
// Memory: blocks allocated on the device while the capture runs come from, and return to, the
// graph's private pool; so do blocks freed on that device while the capture runs. They are never
// handed to code outside that capture while the graph exists (its replays write them); reset()
// or destruction gives the pool's free blocks back to the general cache, and blocks still in use
// return there when freed.
//
// In a build without CUDA every member that needs a device throws CudaError ("... not built");
// is_current_stream_capturing() returns false.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lockstep/cuda/runtime.h"

namespace lockstep::cuda {

/// Whether compute_stream(device) is being captured into a CUDA graph now (also a capture that
/// an unsafe call has already invalidated). False without CUDA, for a device that does not exist
/// or one whose stream was never created. torch.cuda.is_current_stream_capturing.
bool is_current_stream_capturing(int device) noexcept;

/// Throws CudaError "<op> reads device memory back to the host, which CUDA graph capture does not
/// allow (...)" when compute_stream(device) is capturing; otherwise does nothing. Called before
/// every host synchronisation in Lockstep's CUDA backend.
void check_not_capturing(int device, const std::string& op);

/// One captured CUDA graph (torch.cuda.CUDAGraph). Not copyable, not movable; one thread at a
/// time calls its members.
class CUDAGraph {
 public:
  CUDAGraph();
  ~CUDAGraph();  ///< reset(); errors are swallowed
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  /// Starts capturing compute_stream(device) (cudaStreamBeginCapture, global mode) and routes the
  /// device's allocations to this graph's private pool. The stream's earlier work is not part of
  /// the graph. CudaError when the device does not exist, when this graph already holds a
  /// capture (reset() first) or when another capture is running on the device's stream.
  void capture_begin(int device);
  /// Ends the capture (cudaStreamEndCapture) and instantiates the graph (cudaGraphInstantiate with
  /// cudaGraphInstantiateFlagAutoFreeOnLaunch, as PyTorch: allocations a library made inside the
  /// capture and left unfreed are freed before the next launch instead of failing it).
  /// CudaError naming the device when CUDA reports the capture invalid (an unsafe call during
  /// it) or instantiation fails; the graph is then reset. CudaError when no capture is running.
  void capture_end();
  /// Abandons a running capture (ends it and discards what was recorded; the pool is released as
  /// by reset()). Never throws; does nothing without a running capture. For error paths.
  void abort_capture() noexcept;
  /// Launches the captured graph on compute_stream(device()) (cudaGraphLaunch), asynchronous like
  /// any other work there. CudaError when nothing was captured or the launch fails.
  void replay();
  /// Waits for the last replay (the device's compute stream) and runs the checks registered by
  /// the captured ops (add_replay_check), in registration order; their exceptions propagate
  /// (e.g. cross_entropy's IndexError for a target out of range in the replayed batch).
  void check_replay();
  /// Destroys the graph and its executable, drops the checks and kept objects, and releases the
  /// private pool (free blocks to the general cache). Safe to call at any time; a running
  /// capture is abandoned.
  void reset();

  /// Whether a graph has been captured and not reset.
  bool captured() const { return exec_ != nullptr; }
  /// Whether capture_begin() was called and capture_end() not yet.
  bool capturing() const { return capturing_; }
  /// The device of the capture (-1 before the first capture_begin()).
  int device() const { return device_; }
  /// The private memory pool's id (torch.cuda.CUDAGraph.pool()): nonzero while the graph holds
  /// a capture.
  std::uint64_t pool() const { return pool_; }

  /// For ops that run while this graph captures: `check` is run by check_replay() after every
  /// replay (it may read device memory back and throw). Kept until reset().
  void add_replay_check(std::function<void()> check);
  /// For ops that run while this graph captures: keeps `object` (e.g. a device tensor the graph
  /// reads or writes) alive until reset().
  void keep_alive(std::shared_ptr<const void> object);

  /// The graph capturing compute_stream(device) now, or nullptr.
  static CUDAGraph* capturing_on(int device) noexcept;

 private:
  void release_pool() noexcept;

  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  int device_ = -1;
  bool capturing_ = false;
  std::uint64_t pool_ = 0;
  std::vector<std::function<void()>> checks_;
  std::vector<std::shared_ptr<const void>> kept_;
};

}  // namespace lockstep::cuda
