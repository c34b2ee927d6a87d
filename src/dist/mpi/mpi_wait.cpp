// The MPI group's waiting: every collective polls its non-blocking MPI request until it
// completes or the deadline passes, serving the roll call between polls (mpi_roll_call.cpp), and
// a failed MPI call or a timeout leaves the group unusable with the error every later call
// repeats.
#include <sched.h>

#include <algorithm>
#include <ctime>

#include "dist/mpi/mpi_group.h"

namespace lockstep::dist::mpi_detail {

namespace {

// Polls spent spinning before the waiting rank starts to yield its core (4 ranks on 2 cores
// must not starve each other), and how long it yields before sleeping 50 us between polls (the
// communication thread sleeps right after the spin).
constexpr int kSpinPolls = 100;
constexpr auto kYieldPhase = std::chrono::milliseconds(5);
// wait_mesh()'s spin before it sleeps in poll(), off the communication thread.
constexpr auto kMeshSpin = std::chrono::microseconds(50);

// The started collectives first (a no-op on the communication thread, which runs them), then the
// group's lock.
std::mutex& after_started(detail::CommQueue& queue, std::mutex& mu) {
  queue.drain();
  return mu;
}

}  // namespace

std::string error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<std::size_t>(len));
}

MpiGroup::Call::Call(MpiGroup& g, Kind kind) : g_(g), lock_(after_started(g.queue_, g.mu_)) {
  g.current_ = kind_name(kind);
  if (g.finalized_) throw DistError(g.where() + ": MPI was finalised (finalize_mpi)");
  if (!g.failure_.empty())
    throw DistError(g.where() + ": the group is unusable after an earlier failure: " + g.failure_);
  const auto now = Clock::now();
  g.deadline_ = g.timeout_s_ > 1e9 ? Clock::time_point::max()
                                   : now + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(g.timeout_s_));
  // A roll call that reached this rank between collectives: a peer has timed out already.
  if (g.size_ > 1) g.check_peers();
}

MpiGroup::Call::~Call() {
  g_.in_flight_.clear();
  ++g_.seq_;
}

std::string MpiGroup::where() const {
  return std::string("mpi ") + current_ + " on rank " + std::to_string(rank_) + " of " +
         std::to_string(size_) + host_suffix();
}

std::string MpiGroup::host_suffix() const {
  return hosts_.empty() ? "" : " (" + hosts_[static_cast<std::size_t>(rank_)] + ")";
}

void MpiGroup::check(int rc, const char* mpi_call) {
  if (rc != MPI_SUCCESS) fail(where() + ": " + mpi_call + " failed: " + error_string(rc), false);
}

void MpiGroup::fail(const std::string& message, bool timeout) {
  failure_ = message;
  // MPI may still write into (or read from) these buffers: keep them alive for good.
  for (auto& t : in_flight_) orphans_.push_back(t);
  in_flight_.clear();
  if (timeout) throw TimeoutError(message);
  throw DistError(message);
}

void MpiGroup::wait(MPI_Request& request, const char* mpi_call) {
  const auto start = Clock::now();
  // The communication thread shares the cores with the computation it overlaps: no yield phase
  // (a yielding thread still takes its turns on a busy core), and the lock is free while it
  // sleeps, so that notify_failure from the main thread is not kept waiting for a collective.
  const bool comm = queue_.on_comm_thread();
  for (int polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), mpi_call);
    if (done) return;
    if (polls < kSpinPolls) continue;
    check_peers();
    const auto now = Clock::now();
    if (now >= deadline_) fail_timeout();
    timespec pause{0, 50'000};
    if (comm) {
      mu_.unlock();  // held by this collective's Call, which unlocks it again at its end
      nanosleep(&pause, nullptr);
      mu_.lock();
    } else if (now - start < kYieldPhase) {
      sched_yield();
    } else {
      nanosleep(&pause, nullptr);
    }
  }
}

void MpiGroup::wait_mesh() {
  const bool comm = queue_.on_comm_thread();
  // A blocking collective's caller has nothing else to do: it spins briefly first, as wait()
  // does, since a small collective's answer is a round trip away and a sleep in poll() adds the
  // wake-up to it. The communication thread does not: its core runs the computation it overlaps.
  const auto spin_end = Clock::now() + (comm ? Clock::duration::zero() : kMeshSpin);
  for (;;) {
    bool done = false;
    try {
      done = mesh_->progress();
    } catch (const tcp::SocketError& e) {
      // A peer that failed on its own sends its notice before it closes the connection.
      serve_roll_call();
      if (notice_from_ >= 0) fail_notified_by_peer();
      fail(where() + ": " + e.what(), false);
    }
    if (done) return;
    if (Clock::now() < spin_end) continue;
    check_peers();
    const auto now = Clock::now();
    if (now >= deadline_) fail_timeout();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now);
    const int ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 1, 10));
    if (comm) {
      mu_.unlock();  // as in wait()
      mesh_->wait_ready(ms);
      mu_.lock();
    } else {
      mesh_->wait_ready(ms);
    }
  }
}

void MpiGroup::exchange_with_peers(std::uint64_t tag, const std::function<Buffer(int)>& send,
                                   const std::function<Buffer(int)>& recv) {
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    const Buffer out = send(j), in = recv(j);
    mesh_->post_send(j, out.data, out.bytes, tag);
    mesh_->post_recv(j, const_cast<void*>(in.data), in.bytes, tag);
  }
  wait_mesh();
}

void MpiGroup::check_peers() {
  serve_roll_call();
  if (notice_from_ >= 0) fail_notified_by_peer();
  if (called_by_ >= 0) fail_called_by_peer();
}

}  // namespace lockstep::dist::mpi_detail
