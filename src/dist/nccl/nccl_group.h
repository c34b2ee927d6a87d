// The "nccl" ProcessGroup (internal): one NcclGroup object per rank, over an NCCL communicator
// on the rank's GPU. nccl_group.cpp has the blocking collectives, nccl_async.cpp the started
// ones and the reduce in either wire format, nccl_checks.cpp the argument checks across ranks,
// nccl_wait.cpp the host waits and NCCL's errors, nccl_init.cpp the communicators' setup
// (new_nccl_group). Compiled only with LOCKSTEP_CUDA.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/cuda/detail/check.h"
#include "lockstep/cuda/runtime.h"
#include "lockstep/dist/nccl.h"

namespace lockstep::dist::nccl_detail {

using ::lockstep::cuda::detail::device_name;

std::string nccl_message(ncclResult_t status, ncclComm_t comm);

// Throws NcclError naming `where`, `op` and the call's file:line (nccl_wait.cpp).
[[noreturn]] void throw_nccl(ncclResult_t status, ncclComm_t comm, const std::string& where,
                             const std::string& op, const char* file, int line);

#define LOCKSTEP_NCCL_CHECK(expr, comm, where, op)                                            \
  do {                                                                                        \
    ncclResult_t lockstep_nccl_status_ = (expr);                                              \
    if (lockstep_nccl_status_ != ncclSuccess)                                                 \
      ::lockstep::dist::nccl_detail::throw_nccl(lockstep_nccl_status_, (comm), (where), (op), \
                                                __FILE__, __LINE__);                          \
  } while (0)

ncclDataType_t nccl_type(DType t);
ncclRedOp_t nccl_op(ReduceOp op);
const char* op_name(ReduceOp op);

// The device address of a tensor's first element. The tensor's device has been checked to be
// this rank's GPU before this is called.
inline void* address(const Tensor& t) { return t.device_raw_data(); }

enum Collective : std::int64_t {
  kAllReduce = 1,
  kReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kBarrier
};

const char* collective_name(std::int64_t c);

// What a rank is about to do, compared across ranks when check_arguments is on.
struct Descriptor {
  std::int64_t collective = 0;
  std::int64_t sequence = 0;
  std::int64_t dtype = -1;  // -1: no tensor (barrier)
  std::int64_t numel = 0;
  std::int64_t op = -1;
  std::int64_t root = -1;
  std::int64_t local_ok = 1;  // 0: this rank's own arguments failed its checks
  std::int64_t wire = 0;      // WireFormat (all_reduce, reduce)
};
static_assert(sizeof(Descriptor) == 8 * sizeof(std::int64_t));

// A started collective (NcclGroup's *_async): an event recorded on the NCCL stream after it.
// wait() makes the device's compute stream wait for the event (PyTorch's WorkNCCL::wait), so the
// host does not block; `keep` holds the collective's tensors and the bfloat16 scratch until then
// (a Work dropped without wait() makes the compute stream wait as it goes, so the caching
// allocator never hands the scratch to compute work while NCCL still uses it).
class NcclWork final : public Work {
 public:
  NcclWork(int device, cudaEvent_t event, std::vector<Tensor> keep)
      : device_(device), event_(event), keep_(std::move(keep)) {}
  ~NcclWork() override;
  void wait() override;
  bool is_completed() override;

 private:
  void order_compute_stream();

  int device_;
  cudaEvent_t event_;
  std::vector<Tensor> keep_;
  bool waited_ = false;
};

// Runs `start` (a collective's checks and enqueueing); its error becomes the Work's.
template <class F>
std::shared_ptr<Work> started_or_failed(F&& start) {
  try {
    return start();
  } catch (...) {
    return completed_work(std::current_exception());
  }
}

// The communicators made by one ncclCommInitAll: they are finalised together (NCCL requires the
// intra-process ranks' ncclCommFinalize calls in one group when one thread makes them) once the
// last rank's group object is gone.
struct Clique {
  std::vector<ncclComm_t> comms;
  std::vector<int> devices;
  ~Clique();
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(ncclComm_t comm, std::shared_ptr<Clique> clique, int device, int rank, int size,
            NcclOptions options, std::shared_ptr<ProcessGroup> bootstrap = nullptr);
  ~NcclGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  int device() const { return device_; }
  const std::shared_ptr<ProcessGroup>& bootstrap() const { return bootstrap_; }

  // Blocking collectives (nccl_group.cpp; all_reduce and reduce through enqueue_reduce in
  // nccl_async.cpp).
  void all_reduce(Tensor& t, ReduceOp op) override;
  void reduce(Tensor& t, int dst, ReduceOp op) override;

  // Started collectives (nccl_async.cpp).
  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op, WireFormat wire) override;
  std::shared_ptr<Work> reduce_async(Tensor& t, int dst, ReduceOp op, WireFormat wire) override;
  std::shared_ptr<Work> all_gather_async(std::vector<Tensor>& outputs,
                                         const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter_async(Tensor& output, const std::vector<Tensor>& inputs,
                                             ReduceOp op) override;

  void broadcast(Tensor& t, int root) override;
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override;
  void barrier() override;

 private:
  std::shared_ptr<Work> enqueue_reduce(Tensor& t, int dst, ReduceOp op, WireFormat wire,
                                       bool async);
  std::shared_ptr<Work> enqueue_all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                           bool async);
  std::shared_ptr<Work> enqueue_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                               ReduceOp op, bool async);

  static std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

  bool to_bootstrap(std::initializer_list<const Tensor*> tensors,
                    const std::vector<Tensor>* list = nullptr) const;

  // Argument checks (nccl_checks.cpp).
  std::string host_hint() const;
  void check_usable(const char* op) const;
  bool check_tensor(const char* op, const Tensor& t);
  bool check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                  const Tensor& like);
  bool report(const char* op, const std::string& problem, bool value_error = false);
  void agree(std::int64_t collective, const Tensor& t, std::int64_t op, std::int64_t root,
             bool local_ok, const char* name, std::int64_t wire = 0);

  // Enqueues `launch` (returning ncclResult_t) on the NCCL stream after the compute stream's work
  // so far. Blocking (`async` false): the compute stream waits for it, null is returned. Started:
  // an NcclWork holding `keep` until its wait() makes the compute stream wait.
  template <class Launch>
  std::shared_ptr<Work> run(const std::string& op, const Tensor& t, bool async,
                            std::vector<Tensor> keep, Launch&& launch) {
    // Nothing to move (every rank has the same count: checked above, or the caller's contract);
    // an empty tensor's address may be null.
    if (t.numel() == 0) return async ? completed_work() : nullptr;
    cuda::DeviceGuard guard(device_);
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(ready_, compute_), device_, "cudaEventRecord");
    LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0), device_, "cudaStreamWaitEvent");
    call(op + "(" + to_string(t.dtype()) + ", " + std::to_string(t.numel()) + " elements)",
         std::forward<Launch>(launch));
    if (!async) {
      LOCKSTEP_CUDA_CHECK(cudaEventRecord(done_, stream_), device_, "cudaEventRecord");
      LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0), device_, "cudaStreamWaitEvent");
      return nullptr;
    }
    cudaEvent_t event = nullptr;
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), device_,
                        "cudaEventCreateWithFlags (nccl Work)");
    const cudaError_t recorded = cudaEventRecord(event, stream_);
    if (recorded != cudaSuccess) cudaEventDestroy(event);
    LOCKSTEP_CUDA_CHECK(recorded, device_, "cudaEventRecord (nccl Work)");
    return std::make_shared<NcclWork>(device_, event, std::move(keep));
  }

  template <class Launch>
  void call(const std::string& op, Launch&& launch) {
    ncclResult_t status = launch();
    if (status != ncclSuccess) {
      broken_ = true;
      broken_reason_ = op + ": " + nccl_message(status, comm_);
      throw_nccl(status, comm_, where_, op, __FILE__, __LINE__);
    }
  }

  // Host waits and failures (nccl_wait.cpp).
  void wait_host(const char* op);
  void abort();

  ncclComm_t comm_;
  std::shared_ptr<Clique> clique_;           // set for groups made by ncclCommInitAll
  std::shared_ptr<ProcessGroup> bootstrap_;  // set for groups made through a bootstrap group
  int device_;
  int rank_;
  int size_;
  NcclOptions options_;
  std::string where_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* scratch_ = nullptr;
  void* host_scratch_ = nullptr;
  std::int64_t sequence_ = 0;
  std::string local_error_;
  bool local_value_error_ = false;
  bool broken_ = false;
  std::string broken_reason_;
};

}  // namespace lockstep::dist::nccl_detail
