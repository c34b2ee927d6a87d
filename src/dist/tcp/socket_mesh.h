// The mpi backend's data path (internal; built with LOCKSTEP_MPI, which bootstraps it): one TCP
// connection between every two ranks, opened when the group is made (socket_connect.cpp) and
// driven by the thread running the collective, which moves bytes with non-blocking
// sendmsg/recvmsg and sleeps in poll() between (gloo's TCP design, the transport PyTorch DDP uses
// on CPUs). Open MPI still launches the ranks, exchanges the addresses, checks the collectives'
// arguments and carries the roll call and failure notices (src/dist/mpi/mpi_roll_call.cpp); the
// collectives' payloads travel here unless LOCKSTEP_MPI_DATA=mpi.
//
// Why not Open MPI's own transport for the payloads: its TCP BTL must be progressed by polling
// (MPI_Test; Lockstep slept 50 us between tests), which cost a rank's one core ~3 ms of CPU per
// 852 KB all-reduce overlapping backward, and it moved multi-MB messages at ~70 % of a 1 Gbit/s
// link (bench/RESULTS.md, "Issue 22, continued"). Why not gloo (Debian's libgloo-dev): its waits
// either block without a way to serve the roll call in between, or, on a timeout, close every
// connection of the context (gloo/transport/tcp/unbound_buffer.cc).
//
// Every transfer carries a 16-byte header (the collective's tag, the payload's byte count) that
// the receiver checks, so ranks that disagree on a collective (argument checks off) fail with
// DistError instead of reading each other's bytes.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace lockstep::dist::tcp {

// A connection failed, or a peer sent what this rank did not expect: the message names the peer
// ("the connection to rank 1 closed: it exited or failed").
class SocketError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SocketMesh {
 public:
  // Opens the connections (collective over `comm`, every rank calls it). `names[r]` names rank r
  // in messages ("rank 1 on host2"). `one_host`: every rank runs on this host, so peers are tried
  // on 127.0.0.1 first. A rank listens on all its interfaces and publishes its IPv4 addresses
  // (those of LOCKSTEP_SOCKET_IFNAME only, when set); a lower rank connects to a higher one,
  // trying the addresses that share a subnet with its own first, `connect_s` seconds each.
  // Throws DistError on every rank when any rank could not connect, naming that rank, what it
  // tried and the fix.
  static std::unique_ptr<SocketMesh> connect(MPI_Comm comm, int rank, int size, bool one_host,
                                             const std::vector<std::string>& names,
                                             double connect_s);
  ~SocketMesh();
  SocketMesh(const SocketMesh&) = delete;
  SocketMesh& operator=(const SocketMesh&) = delete;

  // Queues `bytes` bytes at `data` for `peer` (at most one send and one receive per peer at a
  // time; the buffer must stay valid until progress() returns true). `tag` identifies the
  // collective and its phase on both sides.
  void post_send(int peer, const void* data, std::size_t bytes, std::uint64_t tag);
  void post_recv(int peer, void* data, std::size_t bytes, std::uint64_t tag);
  // Moves what the sockets take without blocking. True when every posted transfer is done.
  // Throws SocketError for a closed or failed connection or an unexpected header.
  bool progress();
  // Sleeps in poll() until a posted transfer can move or `timeout_ms` passes.
  void wait_ready(int timeout_ms);

 private:
  struct Transfer {
    char* data = nullptr;
    std::size_t bytes = 0;  // payload
    std::size_t done = 0;   // header + payload bytes moved
    std::uint64_t header[2] = {};
    bool active = false;
  };
  struct Peer {
    int fd = -1;
    Transfer send, recv;
    int lowat = 1;  // SO_RCVLOWAT as last set
  };
  SocketMesh(int rank, std::vector<std::string> names);
  bool progress_send(int peer);
  bool progress_recv(int peer);
  void set_lowat(Peer& p);

  int rank_;
  std::vector<std::string> names_;
  std::vector<Peer> peers_;
};

}  // namespace lockstep::dist::tcp
