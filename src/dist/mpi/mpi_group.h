// The "mpi" ProcessGroup (internal): one object per process, over duplicates of MPI_COMM_WORLD.
// mpi_group.cpp has the setup, mpi_collectives.cpp the collectives, mpi_all_reduce.cpp all_reduce,
// socket_mesh.h the data path, mpi_wait.cpp the polling and error reporting, mpi_agree.cpp the
// argument check across ranks, mpi_roll_call.cpp the roll call and failure notices, mpi_init.cpp
// init_mpi / finalize_mpi.
#pragma once

// MPI's C API only: without these, OpenMPI's and MPICH's mpi.h pull in their deprecated C++
// bindings, which need libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm_queue.h"
#include "dist/tcp/socket_mesh.h"
#include "lockstep/dist/mpi.h"

namespace lockstep::dist::mpi_detail {

// The collectives, as sent in CallInfo::kind.
enum class Kind : std::int64_t { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier };

// A local argument check that failed, as sent in CallInfo::error (0: none), so that every rank
// throws the same type.
enum class ArgErrorType : std::int64_t { None, Value, Shape, DType, Device };

struct ArgError {
  ArgErrorType type = ArgErrorType::None;
  std::string message;
  explicit operator bool() const { return type != ArgErrorType::None; }
};

// What each rank announces before a collective's data when check_arguments is on (8 x int64).
struct CallInfo {
  std::int64_t seq = 0;    // collectives this group ran before this one
  std::int64_t kind = 0;   // Kind
  std::int64_t dtype = 0;  // DType
  std::int64_t numel = 0;
  std::int64_t op = -1;    // ReduceOp, -1 when the collective has none
  std::int64_t root = -1;  // broadcast root, -1 otherwise
  std::int64_t error = 0;  // ArgErrorType of this rank's own argument checks
  std::int64_t wire = 0;   // WireFormat (all_reduce)
};

class MpiGroup final : public ProcessGroup {
 public:
  // Takes ownership of both communicators (duplicates of MPI_COMM_WORLD with MPI_ERRORS_RETURN):
  // `comm` carries the collectives, `roll` the roll call.
  MpiGroup(MPI_Comm comm, MPI_Comm roll, const MpiOptions& options);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce(Tensor& tensor, ReduceOp op) override;
  // Started collectives run on the group's communication thread (queue_), which progresses their
  // MPI requests; BFloat16 all_reduce / reduce move two-byte elements (all_reduce_wire).
  std::shared_ptr<Work> all_reduce_async(Tensor& tensor, ReduceOp op, WireFormat wire) override;
  std::shared_ptr<Work> reduce_async(Tensor& tensor, int dst, ReduceOp op,
                                     WireFormat wire) override;
  std::shared_ptr<Work> all_gather_async(std::vector<Tensor>& outputs,
                                         const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter_async(Tensor& output, const std::vector<Tensor>& inputs,
                                             ReduceOp op) override;
  void broadcast(Tensor& tensor, int root) override;
  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override;
  void barrier() override;

  void set_options(const MpiOptions& options);
  // Every rank's host name (MPI_Get_processor_name, gathered when the group is made); empty
  // when all ranks run on one host (messages then name ranks alone).
  const std::vector<std::string>& hosts() const { return hosts_; }
  // dist::notify_failure: sends a failure notice to every peer, waits for their acknowledgements
  // at most `wait_seconds`. Never throws.
  void notify_failure(int status, const std::string& message, double wait_seconds) noexcept;
  std::vector<int> unresponsive_ranks();
  // Waits for the started collectives and ends the communication thread, then cancels the
  // roll-call receive and frees the communicators. Returns false (and frees
  // nothing) when a collective failed: MPI requests are still pending then, and MPI_Finalize
  // would wait for the failed rank.
  bool shutdown();

 private:
  using Clock = std::chrono::steady_clock;

  // One collective in progress: waits for the started collectives first (unless it is one, on
  // the communication thread), holds the group's lock, names the collective in errors, sets
  // the deadline, refuses to start on a failed or finalised group. `pin` keeps the tensors MPI
  // may still write to alive if the collective fails.
  class Call {
   public:
    Call(MpiGroup& g, Kind kind);
    ~Call();
    void pin(const Tensor& t) { g_.in_flight_.push_back(t); }

   private:
    MpiGroup& g_;
    std::unique_lock<std::mutex> lock_;
  };

  // all_reduce with its elements on the wire as `wire` says: Native moves the dtype's elements;
  // BFloat16 (float32 only) moves each rank's values rounded to bfloat16 (uint16), the owner of
  // a slice widens the ranks' copies to float32, folds them in rank order and rounds once, and
  // the rounded slices travel back as bfloat16: the bits of the base class's emulation.
  void all_reduce_wire(Tensor& tensor, ReduceOp op, WireFormat wire);
  // Exchanges `info` (with check_arguments) and throws on every rank when the ranks disagree or
  // any rank's own argument check failed; without the check (or on one rank) throws `local` here.
  void agree(CallInfo info, const ArgError& local);
  // Polls `request` until it completes, the deadline passes (TimeoutError) or a peer calls the
  // roll (TimeoutError). `mpi_call` names the MPI function in errors. On the communication
  // thread it sleeps between polls sooner, with the group's lock released (notify_failure).
  void wait(MPI_Request& request, const char* mpi_call);
  // wait() for the transfers posted on mesh_: progresses them, sleeping in poll() (at most 10 ms
  // at a time, with the group's lock released on the communication thread) and serving the roll
  // call in between; a failed connection fails the group (DistError, or PeerFailedError when the
  // peer's failure notice arrived first).
  void wait_mesh();
  // {data, bytes} of one side of a transfer.
  struct Buffer {
    const void* data;
    std::size_t bytes;
  };
  // One phase over mesh_: sends send(j) to and receives recv(j) from every other rank j, tagged
  // `tag`, then wait_mesh(). recv(j).data is written (const only to share the type).
  void exchange_with_peers(std::uint64_t tag, const std::function<Buffer(int)>& send,
                           const std::function<Buffer(int)>& recv);
  // Between polls: serves a peer's roll call, and fails when a peer's failure notice arrived
  // (PeerFailedError) or a peer called the roll (TimeoutError).
  void check_peers();
  // The tag of this collective's transfers in `phase` (0, 1): both sides count collectives.
  std::uint64_t tag(int phase) const { return static_cast<std::uint64_t>(seq_) * 2 + phase; }
  // Throws DistError for a failed MPI call (rc != MPI_SUCCESS) and marks the group failed.
  void check(int rc, const char* mpi_call);
  [[noreturn]] void fail(const std::string& message, bool timeout);
  [[noreturn]] void fail_timeout();
  [[noreturn]] void fail_called_by_peer();
  // A peer's failure notice arrived: PeerFailedError naming it.
  [[noreturn]] void fail_notified_by_peer();

  // Roll call: answers a pending ping with a pong (serve_roll_call), or pings every peer and
  // returns the ranks that did not answer within `window_s` (roll_call).
  void post_ping_receive();
  void serve_roll_call();
  std::vector<int> roll_call(double window_s);
  void reap_sends();

  std::string where() const;  // "mpi all_reduce on rank 0 of 2" (+ " (host1)": see hosts_)
  // "rank 1", or "rank 1 on host2" in a job whose ranks run on more than one host.
  const std::string& rank_name(int r) const { return rank_names_[static_cast<std::size_t>(r)]; }
  // "no answer from rank 1 (hung, stopped or dead)" / "... from ranks 1, 3 ..." / every rank
  // answered.
  std::string describe_roll_call(const std::vector<int>& silent) const;
  // " (host1)": this rank's host in a job on several hosts, else "".
  std::string host_suffix() const;
  // Fills hosts_ (every rank's MPI_Get_processor_name; empty when all ranks share one host, or
  // the names could not be gathered) and rank_names_. Collective: called by the constructor.
  void gather_hosts();
  void* scratch(std::size_t index, std::size_t bytes);

  MPI_Comm comm_;
  MPI_Comm roll_;
  std::vector<std::string> hosts_, rank_names_;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  bool check_arguments_;

  std::mutex mu_;
  const char* current_ = "";  // the collective in progress, for messages
  std::int64_t seq_ = 0;
  Clock::time_point deadline_{};
  bool finalized_ = false;
  std::string failure_;  // the first failure; non-empty: the group is unusable
  std::vector<Tensor> in_flight_;
  std::vector<Tensor> orphans_;  // tensors a failed collective may still write to

  CallInfo my_info_;
  std::vector<CallInfo> infos_;
  // all_reduce's slices (counts_, displs_) and MPI_Ialltoallv's send and receive layouts; MPI
  // reads them until the call completes, so they are members.
  std::vector<int> counts_, displs_, scounts_, rcounts_, rdispls_;
  std::vector<const void*> blocks_;  // the copies fold() combines, in rank order
  std::vector<std::byte> scratch_[3];

  // Roll call state (communicator roll_): a receive from any peer is always posted.
  MPI_Request ping_request_ = MPI_REQUEST_NULL;
  std::int64_t ping_buffer_ = 0;
  std::int64_t ping_payload_ = 0;
  const std::int64_t pong_payload_ = 1;
  int called_by_ = -1;  // the first peer whose roll call reached this rank
  std::vector<MPI_Request> sends_;
  std::vector<std::int64_t> pong_buffers_;
  std::vector<MPI_Request> pong_requests_;
  std::vector<int> unresponsive_;
  // Failure notices (communicator roll_, tag kFailTag): a receive from any peer is always
  // posted; a notice is [status, message bytes...] in kNoticeBytes.
  static constexpr std::size_t kNoticeBytes = 512;
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
  char notice_buffer_[kNoticeBytes] = {};
  char my_notice_[kNoticeBytes] = {};
  int notice_from_ = -1, notice_status_ = 0;
  std::string notice_message_;
  std::vector<std::int64_t> acks_;
  void post_notice_receive();

  // The collectives' data path (socket_mesh.h); null on one rank and with LOCKSTEP_MPI_DATA=mpi,
  // where the data moves through MPI's non-blocking collectives.
  std::unique_ptr<tcp::SocketMesh> mesh_;

  detail::CommQueue queue_;  // the communication thread (the group is never destroyed)
};

// MPI_Error_string of `rc`.
std::string error_string(int rc);

// The collective's name in errors ("all_reduce"); defined in mpi_agree.cpp.
const char* kind_name(Kind k);

// The collectives' shared pieces (mpi_group.cpp): the MPI datatype of a dtype, this rank's own
// check of a tensor argument, the CallInfo of a collective, and the fold of n blocks in rank
// order.
MPI_Datatype mpi_type(DType t);
ArgError check_tensor(const Tensor& t, const std::string& what);
CallInfo describe(Kind kind, const Tensor& t, std::int64_t op, std::int64_t root);
void fold(DType dtype, ReduceOp op, const std::vector<const void*>& blocks, std::int64_t m,
          void* out);

}  // namespace lockstep::dist::mpi_detail
