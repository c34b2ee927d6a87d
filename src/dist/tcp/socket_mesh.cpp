// SocketMesh's transfers: each posted send or receive is a 16-byte header and its payload,
// moved with one sendmsg / recvmsg of two iovecs per call; the receiver asks the kernel to wake it
// only once the rest of the message (up to 1 MiB) is in (SO_RCVLOWAT), so a bucket arriving in
// many segments costs one wake-up, not one per segment.
#include "dist/tcp/socket_mesh.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace lockstep::dist::tcp {

namespace {

constexpr std::size_t kHeader = 2 * sizeof(std::uint64_t);
constexpr std::size_t kMaxLowat = std::size_t{1} << 20;

// The iovecs of what remains of a transfer: the rest of its header, then of its payload.
int remaining(std::uint64_t* header, char* data, std::size_t bytes, std::size_t done,
              iovec (&iov)[2]) {
  int n = 0;
  if (done < kHeader) iov[n++] = {reinterpret_cast<char*>(header) + done, kHeader - done};
  const std::size_t at = done > kHeader ? done - kHeader : 0;
  if (at < bytes) iov[n++] = {data + at, bytes - at};
  return n;
}

}  // namespace

SocketMesh::SocketMesh(int rank, std::vector<std::string> names)
    : rank_(rank), names_(std::move(names)), peers_(names_.size()) {}

SocketMesh::~SocketMesh() {
  for (auto& p : peers_)
    if (p.fd >= 0) ::close(p.fd);
}

void SocketMesh::post_send(int peer, const void* data, std::size_t bytes, std::uint64_t tag) {
  Transfer& t = peers_[static_cast<std::size_t>(peer)].send;
  t = Transfer{};
  t.data = static_cast<char*>(const_cast<void*>(data));
  t.bytes = bytes;
  t.header[0] = tag;
  t.header[1] = bytes;
  t.active = true;
}

void SocketMesh::post_recv(int peer, void* data, std::size_t bytes, std::uint64_t tag) {
  Transfer& t = peers_[static_cast<std::size_t>(peer)].recv;
  t = Transfer{};
  t.data = static_cast<char*>(data);
  t.bytes = bytes;
  t.header[0] = tag;  // what the peer's header must say; overwritten as it arrives
  t.header[1] = bytes;
  t.active = true;
}

bool SocketMesh::progress() {
  bool done = true;
  for (int j = 0; j < static_cast<int>(peers_.size()); ++j) {
    if (j == rank_) continue;
    if (peers_[static_cast<std::size_t>(j)].send.active && !progress_send(j)) done = false;
    if (peers_[static_cast<std::size_t>(j)].recv.active && !progress_recv(j)) done = false;
  }
  return done;
}

bool SocketMesh::progress_send(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  Transfer& t = p.send;
  while (t.done < kHeader + t.bytes) {
    iovec iov[2];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(remaining(t.header, t.data, t.bytes, t.done, iov));
    const ssize_t n = ::sendmsg(p.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n < 0)
      throw SocketError("sending to " + names_[static_cast<std::size_t>(peer)] +
                        " failed: " + std::strerror(errno) + " (it exited or failed)");
    t.done += static_cast<std::size_t>(n);
  }
  t.active = false;
  return true;
}

bool SocketMesh::progress_recv(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  Transfer& t = p.recv;
  const std::uint64_t tag = t.header[0], bytes = t.header[1];
  while (t.done < kHeader + t.bytes) {
    const bool had_header = t.done >= kHeader;
    iovec iov[2];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(remaining(t.header, t.data, t.bytes, t.done, iov));
    const ssize_t n = ::recvmsg(p.fd, &msg, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    const std::string& name = names_[static_cast<std::size_t>(peer)];
    if (n == 0) throw SocketError("the connection to " + name + " closed (it exited or failed)");
    if (n < 0)
      throw SocketError("receiving from " + name + " failed: " + std::strerror(errno) +
                        " (it exited or failed)");
    t.done += static_cast<std::size_t>(n);
    if (!had_header && t.done >= kHeader && (t.header[0] != tag || t.header[1] != bytes))
      throw SocketError(name + " sent " + std::to_string(t.header[1]) + " bytes of transfer " +
                        std::to_string(t.header[0]) + " where this rank expected " +
                        std::to_string(bytes) + " bytes of transfer " + std::to_string(tag) +
                        ": the ranks are not running the same collectives");
  }
  t.active = false;
  return true;
}

void SocketMesh::set_lowat(Peer& p) {
  const std::size_t left = kHeader + p.recv.bytes - p.recv.done;
  const int lowat = static_cast<int>(std::clamp<std::size_t>(left, 1, kMaxLowat));
  if (lowat == p.lowat) return;
  // Best effort: without it poll() wakes at every segment, which is only slower.
  if (::setsockopt(p.fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) == 0) p.lowat = lowat;
}

void SocketMesh::wait_ready(int timeout_ms) {
  std::vector<pollfd> fds;
  fds.reserve(peers_.size());
  for (auto& p : peers_) {
    if (p.fd < 0 || (!p.send.active && !p.recv.active)) continue;
    short events = 0;
    if (p.send.active) events |= POLLOUT;
    if (p.recv.active) {
      events |= POLLIN;
      set_lowat(p);
    }
    fds.push_back({p.fd, events, 0});
  }
  if (fds.empty()) return;
  // EINTR or a timeout: the caller's loop progresses, checks its deadline and comes back.
  (void)::poll(fds.data(), fds.size(), timeout_ms);
}

}  // namespace lockstep::dist::tcp
