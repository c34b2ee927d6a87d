// The "nccl" ProcessGroup backend (include/lockstep/dist/nccl.h): NCCL communicators over CUDA
// devices, created with ncclCommInitAll (one process, several GPUs) or ncclCommInitRank with the
// unique id sent through a CPU ProcessGroup (one process per GPU). Compiled only with
// LOCKSTEP_CUDA; src/dist/nccl_stub.cpp stands in for it otherwise.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>

#include "cuda/check.h"
#include "dist/nccl/bf16_wire.h"
#include "lockstep/cuda/graph.h"
#include "lockstep/cuda/runtime.h"
#include "lockstep/dist/nccl.h"

namespace lockstep::dist {

namespace {

using ::lockstep::cuda::detail::device_name;

std::string nccl_message(ncclResult_t status, ncclComm_t comm) {
  std::string text = ncclGetErrorString(status);
  const char* last = ncclGetLastError(comm);
  if (last && *last && text.find(last) == std::string::npos) text += " (" + std::string(last) + ")";
  return text;
}

// "NCCL error on cuda:1 (rank 1 of 2) in ncclAllReduce(float32, 1000 elements): unhandled cuda
// error (...) [src/dist/nccl/nccl_group.cpp:123]"
[[noreturn]] void throw_nccl(ncclResult_t status, ncclComm_t comm, const std::string& where,
                             const std::string& op, const char* file, int line) {
  throw NcclError("NCCL error on " + where + " in " + op + ": " + nccl_message(status, comm) +
                      " [" + file + ":" + std::to_string(line) + "]",
                  static_cast<int>(status));
}

#define LOCKSTEP_NCCL_CHECK(expr, comm, where, op)                                  \
  do {                                                                              \
    ncclResult_t lockstep_nccl_status_ = (expr);                                    \
    if (lockstep_nccl_status_ != ncclSuccess)                                       \
      throw_nccl(lockstep_nccl_status_, (comm), (where), (op), __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

// The device address of a tensor's first element. The tensor's device has been checked to be
// this rank's GPU before this is called.
void* address(const Tensor& t) { return t.device_raw_data(); }

enum Collective : std::int64_t {
  kAllReduce = 1,
  kReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kBarrier
};

const char* collective_name(std::int64_t c) {
  switch (c) {
    case kAllReduce:
      return "all_reduce";
    case kReduce:
      return "reduce";
    case kBroadcast:
      return "broadcast";
    case kAllGather:
      return "all_gather";
    case kReduceScatter:
      return "reduce_scatter";
    case kBarrier:
      return "barrier";
  }
  return "unknown collective";
}

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
  ~NcclWork() override {
    try {
      order_compute_stream();
    } catch (...) {  // a broken device: the error surfaces at its next use
    }
    cudaEventDestroy(event_);
  }
  void wait() override { order_compute_stream(); }
  bool is_completed() override { return cudaEventQuery(event_) != cudaErrorNotReady; }

 private:
  void order_compute_stream() {
    if (waited_) return;
    waited_ = true;
    ::lockstep::cuda::DeviceGuard guard(device_);
    const auto compute = static_cast<cudaStream_t>(::lockstep::cuda::compute_stream(device_));
    LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(compute, event_, 0), device_,
                        "cudaStreamWaitEvent (nccl Work::wait)");
    keep_.clear();
  }

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
  ~Clique() {
    // Errors cannot be reported from a destructor; a broken communicator was aborted already.
    int previous = -1;
    cudaGetDevice(&previous);
    for (std::size_t i = 0; i < comms.size(); ++i) {
      if (!comms[i]) continue;
      cudaSetDevice(devices[i]);
      cudaDeviceSynchronize();
    }
    ncclGroupStart();
    for (ncclComm_t c : comms)
      if (c) ncclCommFinalize(c);
    ncclGroupEnd();
    for (ncclComm_t c : comms)
      if (c) ncclCommDestroy(c);
    if (previous >= 0) cudaSetDevice(previous);
  }
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(ncclComm_t comm, std::shared_ptr<Clique> clique, int device, int rank, int size,
            NcclOptions options, std::shared_ptr<ProcessGroup> bootstrap = nullptr)
      : comm_(comm),
        clique_(std::move(clique)),
        bootstrap_(std::move(bootstrap)),
        device_(device),
        rank_(rank),
        size_(size),
        options_(options) {
    where_ = device_name(device_) + " (rank " + std::to_string(rank_) + " of " +
             std::to_string(size_) + ")";
    cuda::DeviceGuard guard(device_);
    compute_ = static_cast<cudaStream_t>(cuda::compute_stream(device_));
    LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), device_,
                        "cudaStreamCreateWithFlags (NCCL stream)");
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), device_,
                        "cudaEventCreateWithFlags");
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), device_,
                        "cudaEventCreateWithFlags");
    // Scratch for the argument check and barrier: one descriptor in, size descriptors out.
    const std::size_t bytes = sizeof(Descriptor) * static_cast<std::size_t>(size_ + 1);
    LOCKSTEP_CUDA_CHECK(cudaMalloc(&scratch_, bytes), device_,
                        "cudaMalloc(" + std::to_string(bytes) + " bytes, NCCL scratch)");
    // On the NCCL stream: a plain cudaMemset runs on the legacy default stream, which does not
    // order the non-blocking NCCL stream's first use of scratch_ after it.
    LOCKSTEP_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, bytes, stream_), device_,
                        "cudaMemsetAsync (NCCL scratch)");
    LOCKSTEP_CUDA_CHECK(cudaMallocHost(&host_scratch_, bytes), device_,
                        "cudaMallocHost(" + std::to_string(bytes) + " bytes)");
  }

  ~NcclGroup() override {
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (!clique_ && comm_) ncclCommDestroy(comm_);
    if (scratch_) cudaFree(scratch_);
    if (host_scratch_) cudaFreeHost(host_scratch_);
    if (ready_) cudaEventDestroy(ready_);
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
    if (previous >= 0) cudaSetDevice(previous);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  int device() const { return device_; }
  const std::shared_ptr<ProcessGroup>& bootstrap() const { return bootstrap_; }

  // Collectives whose tensors are all on the host go to the bootstrap group (nccl.h); the rest
  // are NCCL's, whose checks refuse a tensor that is not on this rank's GPU.
  void all_reduce(Tensor& t, ReduceOp op) override {
    if (to_bootstrap({&t})) return bootstrap_->all_reduce(t, op);
    enqueue_reduce(t, -1, op, WireFormat::Native, false);
  }

  void reduce(Tensor& t, int dst, ReduceOp op) override {
    if (to_bootstrap({&t})) return bootstrap_->reduce(t, dst, op);
    check_root("reduce", dst);
    enqueue_reduce(t, dst, op, WireFormat::Native, false);
  }

  // Started collectives: enqueued on the NCCL stream like the blocking ones (the argument check,
  // when on, still waits on the host for the descriptors), with an event instead of the compute
  // stream's wait (NcclWork). Errors of the checks come out of wait().
  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op, WireFormat wire) override {
    if (to_bootstrap({&t})) return bootstrap_->all_reduce_async(t, op, wire);
    return started_or_failed([&] { return enqueue_reduce(t, -1, op, wire, true); });
  }
  std::shared_ptr<Work> reduce_async(Tensor& t, int dst, ReduceOp op, WireFormat wire) override {
    if (to_bootstrap({&t})) return bootstrap_->reduce_async(t, dst, op, wire);
    return started_or_failed([&] {
      check_root("reduce", dst);
      return enqueue_reduce(t, dst, op, wire, true);
    });
  }
  std::shared_ptr<Work> all_gather_async(std::vector<Tensor>& outputs,
                                         const Tensor& input) override {
    if (to_bootstrap({&input}, &outputs)) return bootstrap_->all_gather_async(outputs, input);
    return started_or_failed([&] { return enqueue_all_gather(outputs, input, true); });
  }
  std::shared_ptr<Work> reduce_scatter_async(Tensor& output, const std::vector<Tensor>& inputs,
                                             ReduceOp op) override {
    if (to_bootstrap({&output}, &inputs))
      return bootstrap_->reduce_scatter_async(output, inputs, op);
    return started_or_failed([&] { return enqueue_reduce_scatter(output, inputs, op, true); });
  }

  // The epilogue form: the bootstrap's own for host tensors, else the default (NCCL's reduce,
  // then the epilogue on dst).
  void reduce(Tensor& t, int dst, ReduceOp op, const Epilogue& epilogue) override {
    if (to_bootstrap({&t})) return bootstrap_->reduce(t, dst, op, epilogue);
    ProcessGroup::reduce(t, dst, op, epilogue);
  }

  void broadcast(Tensor& t, int root) override {
    if (to_bootstrap({&t})) return bootstrap_->broadcast(t, root);
    check_root("broadcast", root);
    const bool ok = check_tensor("broadcast", t);
    agree(kBroadcast, t, -1, root, ok, "broadcast");
    run("ncclBroadcast", t, false, {}, [&] {
      return ncclBroadcast(address(t), address(t), count(t), nccl_type(t.dtype()), root, comm_,
                           stream_);
    });
  }

  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    if (to_bootstrap({&input}, &outputs)) return bootstrap_->all_gather(outputs, input);
    enqueue_all_gather(outputs, input, false);
  }

  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    if (to_bootstrap({&output}, &inputs)) return bootstrap_->reduce_scatter(output, inputs, op);
    enqueue_reduce_scatter(output, inputs, op, false);
  }

  void barrier() override {
    check_usable("barrier");
    cuda::check_not_capturing(device_, "nccl barrier");
    agree(kBarrier, Tensor(), -1, -1, true, "barrier");
    cuda::DeviceGuard guard(device_);
    // Everything this rank enqueued on the device first, then one small all-reduce that every
    // rank must enter, waited for on the host.
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(ready_, compute_), device_, "cudaEventRecord");
    LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0), device_, "cudaStreamWaitEvent");
    call("ncclAllReduce (barrier)",
         [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclInt64, ncclSum, comm_, stream_); });
    wait_host("barrier");
  }

 private:
  // all_reduce (dst < 0) and reduce (to dst) in `wire`'s format; BFloat16: the float32 values
  // rounded to bfloat16 into a scratch buffer, NCCL's bfloat16 reduction (ncclBfloat16: NCCL
  // rounds the partial results to bfloat16 at every step of its ring or tree, so the result is
  // close to, not bit-equal with, the emulation's single rounding of a float32 sum), widened back
  // (on every rank; for reduce, on dst). Returns the Work when `async`, else null (the compute
  // stream waits for the collective).
  std::shared_ptr<Work> enqueue_reduce(Tensor& t, int dst, ReduceOp op, WireFormat wire,
                                       bool async) {
    const char* name = dst < 0 ? "all_reduce" : "reduce";
    const bool ok = check_tensor(name, t);
    if (ok && wire == WireFormat::BFloat16 && t.dtype() != DType::Float32)
      throw DTypeError("nccl " + std::string(name) + " on " + where_ +
                       ": the bfloat16 wire format takes float32 tensors, got " +
                       to_string(t.dtype()));
    agree(dst < 0 ? kAllReduce : kReduce, t, static_cast<std::int64_t>(op), dst, ok, name,
          static_cast<std::int64_t>(wire));
    auto launch = [&](void* buffer, ncclDataType_t type) {
      return dst < 0 ? ncclAllReduce(buffer, buffer, count(t), type, nccl_op(op), comm_, stream_)
                     : ncclReduce(buffer, buffer, count(t), type, nccl_op(op), dst, comm_, stream_);
    };
    const std::string call_name = dst < 0 ? "ncclAllReduce" : "ncclReduce";
    if (wire == WireFormat::Native)
      return run(call_name, t, async, {t}, [&] { return launch(address(t), nccl_type(t.dtype())); });
    // Two bytes per element: a float32 tensor of half as many elements holds the bits.
    Tensor bits = Tensor::empty(Shape{(t.numel() + 1) / 2},
                                TensorOptions(kFloat32).device(Device(DeviceType::CUDA, device_)));
    return run(call_name + " (bfloat16)", t, async, {t, bits}, [&] {
      auto* wire_bits = static_cast<std::uint16_t*>(address(bits));
      auto* values = static_cast<float*>(address(t));
      nccl_detail::to_bfloat16(values, wire_bits, t.numel(), device_, stream_);
      const ncclResult_t status = launch(wire_bits, ncclBfloat16);
      if (status == ncclSuccess && (dst < 0 || dst == rank_))
        nccl_detail::from_bfloat16(wire_bits, values, t.numel(), device_, stream_);
      return status;
    });
  }

  std::shared_ptr<Work> enqueue_all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                           bool async) {
    bool ok = check_tensor("all_gather", input);
    ok = check_list("all_gather", "outputs", outputs, input) && ok;
    agree(kAllGather, input, -1, -1, ok, "all_gather");
    std::vector<Tensor> keep = outputs;
    keep.push_back(input);
    // One broadcast per rank into outputs[r], fused by NCCL into one group launch.
    return run("ncclBroadcast (all_gather)", input, async, std::move(keep), [&] {
      ncclResult_t status = ncclGroupStart();
      for (int r = 0; r < size_ && status == ncclSuccess; ++r)
        status = ncclBroadcast(address(input), address(outputs[static_cast<std::size_t>(r)]),
                               count(input), nccl_type(input.dtype()), r, comm_, stream_);
      ncclResult_t end = ncclGroupEnd();
      return status != ncclSuccess ? status : end;
    });
  }

  std::shared_ptr<Work> enqueue_reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                               ReduceOp op, bool async) {
    bool ok = check_tensor("reduce_scatter", output);
    ok = check_list("reduce_scatter", "inputs", inputs, output) && ok;
    agree(kReduceScatter, output, static_cast<std::int64_t>(op), -1, ok, "reduce_scatter");
    std::vector<Tensor> keep = inputs;
    keep.push_back(output);
    // inputs[r] of every rank is reduced onto rank r's output: one ncclReduce per rank, grouped.
    return run("ncclReduce (reduce_scatter)", output, async, std::move(keep), [&] {
      ncclResult_t status = ncclGroupStart();
      for (int r = 0; r < size_ && status == ncclSuccess; ++r)
        status = ncclReduce(address(inputs[static_cast<std::size_t>(r)]),
                            r == rank_ ? address(output) : nullptr, count(output),
                            nccl_type(output.dtype()), nccl_op(op), r, comm_, stream_);
      ncclResult_t end = ncclGroupEnd();
      return status != ncclSuccess ? status : end;
    });
  }

  static std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

  // Whether a collective goes to the bootstrap group: there is one and every tensor it names is
  // a defined CPU tensor. Otherwise the NCCL path's checks take over (and refuse what is not on
  // this rank's GPU, naming it).
  bool to_bootstrap(std::initializer_list<const Tensor*> tensors,
                    const std::vector<Tensor>* list = nullptr) const {
    if (!bootstrap_) return false;
    auto host = [](const Tensor& t) { return t.defined() && t.device().is_cpu(); };
    for (const Tensor* t : tensors)
      if (!host(*t)) return false;
    if (list)
      for (const Tensor& t : *list)
        if (!host(t)) return false;
    return true;
  }

  // What the NCCL path's refusal of a tensor off this rank's GPU adds about CPU tensors.
  std::string host_hint() const {
    return bootstrap_ ? " (CPU tensors go to the bootstrap group (" + bootstrap_->backend() +
                            ") only when every tensor of the collective is on the CPU)"
                      : " (a group made by new_nccl_group(bootstrap, device) sends collectives "
                        "on CPU tensors to its bootstrap group; this one has none)";
  }

  void check_usable(const char* op) const {
    if (broken_)
      throw DistError("nccl " + std::string(op) + " on " + where_ +
                      ": the group is unusable after an earlier failure (" + broken_reason_ + ")");
  }

  // Local checks. With check_arguments they are reported through agree() so that every rank
  // throws; without, they throw here.
  bool check_tensor(const char* op, const Tensor& t) {
    check_usable(op);
    std::string problem;
    if (!t.defined())
      problem = "the tensor is undefined";
    else if (!t.device().is_cuda() || t.device().index != device_)
      problem = "the tensor is on " + t.device().str() +
                "; this rank's NCCL collectives take tensors on " + device_name(device_) +
                host_hint();
    return report(op, problem);
  }

  bool check_list(const char* op, const char* what, const std::vector<Tensor>& list,
                  const Tensor& like) {
    std::string problem;
    bool wrong_length = false;
    if (list.size() != static_cast<std::size_t>(size_)) {
      wrong_length = true;
      problem = std::string(what) + " has " + std::to_string(list.size()) +
                " tensors; the group has " + std::to_string(size_) + " ranks";
    }
    for (std::size_t r = 0; problem.empty() && r < list.size(); ++r) {
      const Tensor& t = list[r];
      if (!t.defined() || !t.device().is_cuda() || t.device().index != device_)
        problem = std::string(what) + "[" + std::to_string(r) + "] is " +
                  (t.defined() ? "on " + t.device().str() : std::string("undefined")) +
                  "; this rank's NCCL collectives take tensors on " + device_name(device_) +
                  host_hint();
      else if (like.defined() && (t.dtype() != like.dtype() || t.numel() != like.numel()))
        problem = std::string(what) + "[" + std::to_string(r) + "] is " + to_string(t.dtype()) +
                  " with " + std::to_string(t.numel()) + " elements; expected " +
                  to_string(like.dtype()) + " with " + std::to_string(like.numel());
    }
    return report(op, problem, wrong_length);
  }

  // Records (check_arguments) or throws (without) this rank's own argument error: DeviceError
  // for a tensor on the wrong device, ValueError for a list of the wrong length.
  bool report(const char* op, const std::string& problem, bool value_error = false) {
    if (problem.empty()) return true;
    std::string message = "nccl " + std::string(op) + " on " + where_ + ": " + problem;
    if (!options_.check_arguments) {
      if (value_error) throw ValueError(message);
      throw DeviceError(message);
    }
    local_error_ = std::move(message);
    local_value_error_ = value_error;
    return false;
  }

  // With check_arguments: every rank learns what every other rank is about to do and all throw
  // the same error when they differ or when one rank's arguments were bad.
  void agree(std::int64_t collective, const Tensor& t, std::int64_t op, std::int64_t root,
             bool local_ok, const char* name, std::int64_t wire = 0) {
    ++sequence_;
    if (!options_.check_arguments) return;
    // The check waits for the other ranks' descriptors on the host.
    cuda::check_not_capturing(device_, "nccl " + std::string(name) + "'s argument check");
    Descriptor mine;
    mine.collective = collective;
    mine.sequence = sequence_;
    mine.dtype = t.defined() ? static_cast<std::int64_t>(t.dtype()) : -1;
    mine.numel = t.defined() ? t.numel() : 0;
    mine.op = op;
    mine.root = root;
    mine.local_ok = local_ok ? 1 : 0;
    mine.wire = wire;

    cuda::DeviceGuard guard(device_);
    auto* host = static_cast<Descriptor*>(host_scratch_);
    auto* dev = static_cast<Descriptor*>(scratch_);
    host[0] = mine;
    LOCKSTEP_CUDA_CHECK(
        cudaMemcpyAsync(dev, host, sizeof(Descriptor), cudaMemcpyHostToDevice, stream_), device_,
        "cudaMemcpyAsync (nccl argument check)");
    call("ncclAllGather (argument check)",
         [&] { return ncclAllGather(dev, dev + 1, 8, ncclInt64, comm_, stream_); });
    LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(host + 1, dev + 1, sizeof(Descriptor) * size_,
                                        cudaMemcpyDeviceToHost, stream_),
                        device_, "cudaMemcpyAsync (nccl argument check)");
    wait_host(name);

    const std::string prefix = "nccl " + std::string(name) + " on " + where_ + ": ";
    for (int r = 0; r < size_; ++r) {
      const Descriptor& d = host[1 + r];
      if (!d.local_ok) {
        if (r == rank_) {
          const std::string message = local_error_;
          local_error_.clear();
          if (local_value_error_) throw ValueError(message);
          throw DeviceError(message);
        }
        throw DistError(prefix + "rank " + std::to_string(r) + "'s arguments were refused there");
      }
    }
    const Descriptor& first = host[1];
    for (int r = 1; r < size_; ++r) {
      const Descriptor& d = host[1 + r];
      const std::string ranks = "rank 0 and rank " + std::to_string(r);
      if (d.collective != first.collective || d.sequence != first.sequence)
        throw DistError(prefix + ranks + " called different collectives (" +
                        collective_name(first.collective) + " #" + std::to_string(first.sequence) +
                        " vs " + collective_name(d.collective) + " #" + std::to_string(d.sequence) +
                        ")");
      if (d.dtype != first.dtype)
        throw DTypeError(prefix + ranks + " passed different dtypes (" +
                         to_string(static_cast<DType>(first.dtype)) + " vs " +
                         to_string(static_cast<DType>(d.dtype)) + ")");
      if (d.numel != first.numel)
        throw ShapeError(prefix + ranks + " passed tensors of different sizes (" +
                         std::to_string(first.numel) + " vs " + std::to_string(d.numel) +
                         " elements)");
      if (d.op != first.op)
        throw DistError(prefix + ranks + " asked for different reductions (" +
                        op_name(static_cast<ReduceOp>(first.op)) + " vs " +
                        op_name(static_cast<ReduceOp>(d.op)) + ")");
      if (d.root != first.root)
        throw DistError(prefix + ranks + " named different roots (" + std::to_string(first.root) +
                        " vs " + std::to_string(d.root) + ")");
      if (d.wire != first.wire)
        throw DistError(prefix + ranks + " asked for different wire formats (" +
                        (first.wire ? "bfloat16" : "native") + " vs " +
                        (d.wire ? "bfloat16" : "native") + ")");
    }
  }

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
      LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0), device_,
                          "cudaStreamWaitEvent");
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

  // Waits on the host for the NCCL stream, watching NCCL's asynchronous error state, for at most
  // options_.timeout_seconds; aborts the communicator and throws TimeoutError after that.
  void wait_host(const char* op) {
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        broken_ = true;
        broken_reason_ = std::string(op) + ": " + cudaGetErrorName(q);
        LOCKSTEP_CUDA_CHECK(q, device_,
                            std::string("nccl ") + op + " (waiting for the NCCL stream)");
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        broken_ = true;
        broken_reason_ = std::string(op) + ": " + nccl_message(async, comm_);
        abort();
        throw_nccl(async, nullptr, where_, std::string("nccl ") + op, __FILE__, __LINE__);
      }
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (std::isfinite(options_.timeout_seconds) && waited > options_.timeout_seconds) {
        broken_ = true;
        broken_reason_ = std::string(op) + " timed out";
        abort();
        throw TimeoutError("nccl " + std::string(op) + " timed out after " +
                           std::to_string(options_.timeout_seconds) + " s on " + where_ +
                           ": another rank did not enter it (hung, stopped or dead); the "
                           "communicator was aborted");
      }
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Aborts the communicator (ncclCommAbort) after a failure; the Clique then skips it.
  void abort() {
    if (!comm_) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    if (clique_) clique_->comms[static_cast<std::size_t>(rank_)] = nullptr;
  }

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

void check_options(const NcclOptions& options) {
  if (!(options.timeout_seconds > 0))
    throw ValueError("nccl: timeout_seconds must be > 0, got " +
                     std::to_string(options.timeout_seconds));
}

int cuda_index(Device d, const char* who) {
  if (!d.is_cuda())
    throw DeviceError(std::string(who) + ": " + d.str() +
                      " is not a CUDA device; NCCL groups are made of cuda:k devices");
  cuda::check_device(d.index);
  return d.index;
}

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return {};
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::vector<std::shared_ptr<ProcessGroup>> new_nccl_group(const std::vector<Device>& devices,
                                                          NcclOptions options) {
  check_options(options);
  if (devices.empty()) throw ValueError("new_nccl_group: the device list is empty");
  for (std::size_t i = 0; i < devices.size(); ++i)
    for (std::size_t j = i + 1; j < devices.size(); ++j)
      if (devices[i] == devices[j])
        throw ValueError("new_nccl_group: " + devices[i].str() + " is listed twice (positions " +
                         std::to_string(i) + " and " + std::to_string(j) +
                         "); NCCL cannot place two ranks on one GPU");
  std::vector<int> ids;
  for (Device d : devices) ids.push_back(cuda_index(d, "new_nccl_group"));

  auto clique = std::make_shared<Clique>();
  clique->devices = ids;
  clique->comms.assign(ids.size(), nullptr);
  {
    cuda::DeviceGuard guard(ids[0]);  // ncclCommInitAll changes the current device
    LOCKSTEP_NCCL_CHECK(
        ncclCommInitAll(clique->comms.data(), static_cast<int>(ids.size()), ids.data()), nullptr,
        "cuda (" + std::to_string(ids.size()) + " devices)", "ncclCommInitAll");
  }
  std::vector<std::shared_ptr<ProcessGroup>> out;
  const int n = static_cast<int>(ids.size());
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_shared<NcclGroup>(clique->comms[static_cast<std::size_t>(r)], clique,
                                              ids[static_cast<std::size_t>(r)], r, n, options));
  return out;
}

std::shared_ptr<ProcessGroup> new_nccl_group(std::shared_ptr<ProcessGroup> bootstrap, Device device,
                                             NcclOptions options) {
  if (!bootstrap) throw ValueError("new_nccl_group: null bootstrap group");
  check_options(options);
  const int rank = bootstrap->rank();
  const int size = bootstrap->size();
  const std::string where =
      device.str() + " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  // Local problems are shared first so that no rank waits in NCCL for one that gave up.
  std::string problem;
  std::array<std::int64_t, 2> uuid{0, 0};
  try {
    const int index = cuda_index(device, "new_nccl_group");
    cudaDeviceProp prop{};
    LOCKSTEP_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), index, "cudaGetDeviceProperties");
    std::memcpy(uuid.data(), prop.uuid.bytes, sizeof(uuid));
  } catch (const Error& e) {
    problem = e.what();
  }
  Tensor mine = Tensor::empty(Shape{3}, TensorOptions(kInt64));
  auto* m = mine.data_ptr<std::int64_t>();
  m[0] = problem.empty() ? 1 : 0;
  m[1] = uuid[0];
  m[2] = uuid[1];
  std::vector<Tensor> all;
  for (int r = 0; r < size; ++r) all.push_back(Tensor::empty(Shape{3}, TensorOptions(kInt64)));
  bootstrap->all_gather(all, mine);
  if (!problem.empty()) throw DeviceError("new_nccl_group on " + where + ": " + problem);
  for (int r = 0; r < size; ++r) {
    const auto* a = all[static_cast<std::size_t>(r)].data_ptr<std::int64_t>();
    if (!a[0])
      throw DistError("new_nccl_group on " + where + ": rank " + std::to_string(r) +
                      " could not use its device (its own error says why)");
    for (int s = 0; s < r; ++s) {
      const auto* b = all[static_cast<std::size_t>(s)].data_ptr<std::int64_t>();
      if (a[1] == b[1] && a[2] == b[2])
        throw ValueError("new_nccl_group on " + where + ": rank " + std::to_string(s) +
                         " and rank " + std::to_string(r) +
                         " use the same GPU; NCCL cannot place two ranks on one GPU");
    }
  }

  // The unique id (128 bytes) travels as 16 int64 from rank 0.
  ncclUniqueId id{};
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int64_t) == 0);
  Tensor id_tensor =
      Tensor::empty(Shape{static_cast<std::int64_t>(sizeof(ncclUniqueId) / sizeof(std::int64_t))},
                    TensorOptions(kInt64));
  if (rank == 0) {
    LOCKSTEP_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, where, "ncclGetUniqueId");
    std::memcpy(id_tensor.data_ptr<std::int64_t>(), &id, sizeof(id));
  }
  bootstrap->broadcast(id_tensor, 0);
  std::memcpy(&id, id_tensor.data_ptr<std::int64_t>(), sizeof(id));

  ncclComm_t comm = nullptr;
  {
    cuda::DeviceGuard guard(device.index);
    LOCKSTEP_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank), nullptr, where,
                        "ncclCommInitRank");
  }
  return std::make_shared<NcclGroup>(comm, nullptr, device.index, rank, size, options,
                                     std::move(bootstrap));
}

std::optional<Device> nccl_device(const ProcessGroup& group) {
  if (const auto* g = dynamic_cast<const NcclGroup*>(&group))
    return Device(DeviceType::CUDA, g->device());
  return std::nullopt;
}

std::shared_ptr<ProcessGroup> nccl_bootstrap(const ProcessGroup& group) {
  if (const auto* g = dynamic_cast<const NcclGroup*>(&group)) return g->bootstrap();
  return nullptr;
}

}  // namespace lockstep::dist
