// The MPI group's failure handling: a timed-out rank calls a roll over a separate communicator
// to name the ranks that are gone, and a rank that hears the roll while inside a collective
// answers it and fails too, so no surviving rank waits out its own timeout; a failing rank's
// notice (dist::notify_failure) reaches the others the same way. shutdown() ends the roll-call
// channel.
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "dist/mpi/mpi_group.h"

namespace lockstep::dist::mpi_detail {

namespace {

constexpr int kPingTag = 1;
constexpr int kPongTag = 2;
constexpr int kFailTag = 3;
constexpr int kFailAckTag = 4;
constexpr double kRollCallSeconds = 1.5;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace

std::string MpiGroup::describe_roll_call(const std::vector<int>& silent) const {
  if (silent.empty())
    return "every rank answered a roll call, so all are alive: a rank stayed out of collectives "
           "for longer than the timeout";
  std::string s = "no answer from ";
  if (hosts_.empty()) {  // "rank 1" / "ranks 1, 3"
    s += silent.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < silent.size(); ++i) s += (i ? ", " : "") + std::to_string(silent[i]);
  } else {  // "rank 1 on host2, rank 3 on host3"
    for (std::size_t i = 0; i < silent.size(); ++i) s += (i ? ", " : "") + rank_name(silent[i]);
  }
  return s + " (hung, stopped or dead)";
}

void MpiGroup::fail_timeout() {
  unresponsive_ = roll_call(kRollCallSeconds);
  fail(std::string("mpi ") + current_ + " timed out after " + seconds(timeout_s_) + " on rank " +
           std::to_string(rank_) + " of " + std::to_string(size_) +
           host_suffix() + ": " +
           describe_roll_call(unresponsive_),
       true);
}

void MpiGroup::fail_called_by_peer() {
  const int caller = called_by_;
  unresponsive_ = roll_call(kRollCallSeconds);
  fail(where() + ": " + rank_name(caller) +
           " timed out in a collective and called the roll; " + describe_roll_call(unresponsive_),
       true);
}

void MpiGroup::fail_notified_by_peer() {
  const std::string message =
      where() + ": " + rank_name(notice_from_) + " failed: " + notice_message_;
  failure_ = message;
  for (auto& t : in_flight_) orphans_.push_back(t);
  in_flight_.clear();
  throw PeerFailedError(message, notice_from_, notice_status_);
}

void MpiGroup::post_ping_receive() {
  if (MPI_Irecv(&ping_buffer_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kPingTag, roll_, &ping_request_) !=
      MPI_SUCCESS)
    ping_request_ = MPI_REQUEST_NULL;
}

void MpiGroup::post_notice_receive() {
  if (MPI_Irecv(notice_buffer_, static_cast<int>(kNoticeBytes), MPI_BYTE, MPI_ANY_SOURCE, kFailTag,
                roll_, &notice_request_) != MPI_SUCCESS)
    notice_request_ = MPI_REQUEST_NULL;
}

void MpiGroup::notify_failure(int status, const std::string& message,
                              double wait_seconds) noexcept {
  try {
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    // A collective of another thread may hold the lock while it waits; do not wait for it long.
    const auto give_up = Clock::now() + std::chrono::milliseconds(200);
    while (!lock.try_lock()) {
      if (Clock::now() >= give_up) return;
      sched_yield();
    }
    if (size_ == 1 || finalized_) return;
    std::int64_t s = status;
    std::memcpy(my_notice_, &s, sizeof s);
    const std::size_t len = std::min<std::size_t>(message.size(), 400);
    std::memcpy(my_notice_ + sizeof s, message.data(), len);
    my_notice_[sizeof s + len] = '\0';
    acks_.assign(static_cast<std::size_t>(size_), 0);
    std::vector<MPI_Request> ack_requests(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (MPI_Irecv(&acks_[static_cast<std::size_t>(p)], 1, MPI_INT64_T, p, kFailAckTag, roll_,
                    &ack_requests[static_cast<std::size_t>(p)]) != MPI_SUCCESS)
        ack_requests[static_cast<std::size_t>(p)] = MPI_REQUEST_NULL;
      MPI_Request send = MPI_REQUEST_NULL;
      if (MPI_Isend(my_notice_, static_cast<int>(kNoticeBytes), MPI_BYTE, p, kFailTag, roll_,
                    &send) == MPI_SUCCESS)
        sends_.push_back(send);
    }
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(wait_seconds));
    for (;;) {
      int pending = 0;
      for (auto& r : ack_requests) {
        if (r == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done)
          r = MPI_REQUEST_NULL;
        else
          ++pending;
      }
      reap_sends();
      if (pending == 0 || Clock::now() >= end) break;
      timespec pause{0, 200'000};
      nanosleep(&pause, nullptr);
    }
    // The process exits next; unanswered receives and unsent notices are left to MPI.
    if (failure_.empty()) failure_ = "this rank failed and notified the others";
  } catch (...) {
  }
}

void MpiGroup::serve_roll_call() {
  if (notice_request_ != MPI_REQUEST_NULL && notice_from_ < 0) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Test(&notice_request_, &arrived, &status) != MPI_SUCCESS) {
      notice_request_ = MPI_REQUEST_NULL;
    } else if (arrived) {
      notice_from_ = status.MPI_SOURCE;
      std::int64_t s = 0;
      std::memcpy(&s, notice_buffer_, sizeof s);
      notice_status_ = static_cast<int>(s);
      notice_buffer_[kNoticeBytes - 1] = '\0';
      notice_message_ = notice_buffer_ + sizeof s;
      MPI_Request send = MPI_REQUEST_NULL;
      if (MPI_Isend(&pong_payload_, 1, MPI_INT64_T, notice_from_, kFailAckTag, roll_, &send) ==
          MPI_SUCCESS)
        sends_.push_back(send);
    }
  }
  if (ping_request_ == MPI_REQUEST_NULL) return;
  int arrived = 0;
  MPI_Status status;
  if (MPI_Test(&ping_request_, &arrived, &status) != MPI_SUCCESS) {
    ping_request_ = MPI_REQUEST_NULL;  // the roll-call channel is broken: stop serving it
    return;
  }
  if (!arrived) return;
  const int caller = status.MPI_SOURCE;
  MPI_Request send = MPI_REQUEST_NULL;
  if (MPI_Isend(&pong_payload_, 1, MPI_INT64_T, caller, kPongTag, roll_, &send) == MPI_SUCCESS)
    sends_.push_back(send);
  if (called_by_ < 0) called_by_ = caller;
  post_ping_receive();
  reap_sends();
}

void MpiGroup::reap_sends() {
  std::erase_if(sends_, [](MPI_Request& r) {
    int done = 0;
    return MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
  });
}

std::vector<int> MpiGroup::roll_call(double window_s) {
  const auto n = static_cast<std::size_t>(size_);
  pong_buffers_.assign(n, 0);
  pong_requests_.assign(n, MPI_REQUEST_NULL);
  std::vector<char> answered(n, 0);
  answered[static_cast<std::size_t>(rank_)] = 1;
  ping_payload_ = seq_;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (MPI_Irecv(&pong_buffers_[p], 1, MPI_INT64_T, p, kPongTag, roll_, &pong_requests_[p]) !=
        MPI_SUCCESS) {
      pong_requests_[p] = MPI_REQUEST_NULL;  // counts as no answer
      continue;
    }
    MPI_Request send = MPI_REQUEST_NULL;
    if (MPI_Isend(&ping_payload_, 1, MPI_INT64_T, p, kPingTag, roll_, &send) == MPI_SUCCESS)
      sends_.push_back(send);
  }
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(window_s));
  for (;;) {
    int waiting = 0;
    for (int p = 0; p < size_; ++p) {
      if (answered[p] || pong_requests_[p] == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&pong_requests_[p], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
        answered[p] = 1;
      else
        ++waiting;
    }
    serve_roll_call();  // peers that time out at the same moment call the roll too
    if (waiting == 0 || Clock::now() >= end) break;
    timespec pause{0, 200'000};
    nanosleep(&pause, nullptr);
  }
  std::vector<int> silent;
  for (int p = 0; p < size_; ++p) {
    if (answered[p]) continue;
    silent.push_back(p);
    // The receive stays cancelled-or-pending; its buffer lives as long as the group.
    if (pong_requests_[p] != MPI_REQUEST_NULL) MPI_Cancel(&pong_requests_[p]);
  }
  return silent;
}

bool MpiGroup::shutdown() {
  queue_.stop();
  std::lock_guard<std::mutex> lock(mu_);
  if (finalized_) return true;
  if (!failure_.empty()) return false;
  finalized_ = true;
  for (MPI_Request* r : {&ping_request_, &notice_request_})
    if (*r != MPI_REQUEST_NULL) {
      MPI_Cancel(r);
      MPI_Wait(r, MPI_STATUS_IGNORE);
    }
  // Pongs to peers are a few bytes, sent eagerly; give them a second, then let MPI finish them.
  const auto end = Clock::now() + std::chrono::seconds(1);
  while (!sends_.empty() && Clock::now() < end) {
    reap_sends();
    sched_yield();
  }
  for (auto& r : sends_) MPI_Request_free(&r);
  sends_.clear();
  MPI_Comm_free(&roll_);
  MPI_Comm_free(&comm_);
  return true;
}

}  // namespace lockstep::dist::mpi_detail
