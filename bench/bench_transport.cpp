// Issue 22's open question, measured: how much of a rank's one core does a started all-reduce
// take from the computation it overlaps, by transport. Exactly two ranks under mpirun
// (bench/compare_transport.sh puts them on two namespace hosts, one core each). Each iteration,
// after a barrier: a fixed computation on the main thread (float32 256x256 matmuls, calibrated
// on rank 0 to --compute-ms and broadcast), and the exchange of --bytes of float32 gradients,
//   mpi     Lockstep's mpi ProcessGroup: all_reduce_async on its communication thread (Open MPI's
//           TCP transport, progressed by polling with 50 us sleeps: src/dist/mpi/mpi_wait.cpp)
//   socket  one TCP connection between the ranks on a thread of its own, non-blocking, the thread
//           asleep in poll() between events, SO_RCVLOWAT set to the rest of the message (the
//           kernel wakes the reader once the message is in, where the receive buffer allows);
//           each rank sends its buffer, receives the peer's and adds the two in rank order
// Prints, per transport, medians over --iters iterations of the slower rank: the computation
// alone, the exchange alone, and both started together (the computation's own time, and the
// time until both are done). A benchmark of the transports, not a test; nothing of it is in the
// library.
//
//   mpirun -np 2 bench_transport [--bytes=851968] [--compute-ms=25] [--iters=15]
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <fcntl.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "lockstep/lockstep.h"

using namespace lockstep;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void fail(const std::string& what) { throw std::runtime_error(what + ": " + std::strerror(errno)); }

// Rank 0 listens on its host's address (its processor name resolved), rank 1 connects.
int connect_pair(int rank) {
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  int port = 0;
  int fd = -1;
  if (rank == 0) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(name, nullptr, &hints, &res) != 0) fail("getaddrinfo");
    const int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
    freeaddrinfo(res);
    addr.sin_port = 0;
    if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail("bind");
    if (listen(lfd, 1) != 0) fail("listen");
    socklen_t alen = sizeof addr;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &alen);
    port = ntohs(addr.sin_port);
    MPI_Bcast(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    fd = accept(lfd, nullptr, nullptr);
    close(lfd);
  } else {
    MPI_Bcast(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(name, std::to_string(port).c_str(), &hints, &res) != 0) fail("getaddrinfo");
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, res->ai_addr, res->ai_addrlen) != 0) fail("connect");
    freeaddrinfo(res);
  }
  if (fd < 0) fail("accept");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// Sends `mine`, receives the peer's copy into `theirs`, then sums in rank order into `mine`.
void socket_exchange(int fd, int rank, std::vector<float>& mine, std::vector<float>& theirs) {
  const auto* out = reinterpret_cast<const char*>(mine.data());
  auto* in = reinterpret_cast<char*>(theirs.data());
  const std::size_t total = mine.size() * sizeof(float);
  std::size_t sent = 0, got = 0;
  while (sent < total || got < total) {
    if (got < total) {
      const int lowat = static_cast<int>(std::min<std::size_t>(total - got, 1 << 20));
      setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
    }
    pollfd p{fd, static_cast<short>((sent < total ? POLLOUT : 0) | (got < total ? POLLIN : 0)), 0};
    if (poll(&p, 1, 30000) <= 0) fail("poll");
    if ((p.revents & POLLOUT) != 0) {
      const ssize_t n = send(fd, out + sent, total - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) fail("send");
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    if ((p.revents & POLLIN) != 0) {
      const ssize_t n = recv(fd, in + got, total - got, 0);
      if (n == 0) throw std::runtime_error("peer closed the connection");
      if (n < 0 && errno != EAGAIN) fail("recv");
      if (n > 0) got += static_cast<std::size_t>(n);
    }
  }
  for (std::size_t i = 0; i < mine.size(); ++i)
    mine[i] = rank == 0 ? mine[i] + theirs[i] : theirs[i] + mine[i];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double slowest(double mine) {
  double out = 0;
  MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  auto group = dist::init_mpi({.timeout_seconds = 60});
  const int rank = group->rank();
  if (group->size() != 2) {
    if (rank == 0) std::fprintf(stderr, "bench_transport: run it on exactly 2 ranks\n");
    dist::finalize_mpi();
    return 2;
  }
  const std::int64_t elems = bench::arg(argc, argv, "bytes", 851968) / 4;
  const double compute_ms = static_cast<double>(bench::arg(argc, argv, "compute-ms", 25));
  const int iters = static_cast<int>(bench::arg(argc, argv, "iters", 15));
  Tensor a = randn({256, 256}), b = randn({256, 256});
  auto matmuls = [&](int n) {
    for (int i = 0; i < n; ++i) (void)matmul(a, b);
  };
  // Calibrate: matmuls per --compute-ms on rank 0.
  matmuls(20);
  auto t0 = Clock::now();
  matmuls(100);
  int reps = static_cast<int>(compute_ms / (ms_since(t0) / 100));
  MPI_Bcast(&reps, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const int fd = connect_pair(rank);
  std::vector<float> mine(static_cast<std::size_t>(elems)), theirs(mine.size());

  if (rank == 0)
    std::printf("transport | bytes | compute alone ms | exchange alone ms | compute with "
                "exchange ms | both done ms | compute slowed by ms\n");
  for (const char* transport : {"mpi", "socket"}) {
    const bool mpi = std::strcmp(transport, "mpi") == 0;
    Tensor grads = ones({elems});
    auto start = [&]() -> std::function<void()> {
      if (mpi) {
        auto work = group->all_reduce_async(grads, dist::ReduceOp::Sum);
        return [work] { work->wait(); };
      }
      auto th = std::make_shared<std::thread>([&] { socket_exchange(fd, rank, mine, theirs); });
      return [th] { th->join(); };
    };
    std::vector<double> alone, xfer, with, both;
    for (int it = 0; it < iters + 2; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = Clock::now();
      matmuls(reps);
      const double c = slowest(ms_since(t0));
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = Clock::now();
      start()();
      const double x = slowest(ms_since(t0));
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = Clock::now();
      auto finish = start();
      matmuls(reps);
      const double w = ms_since(t0);
      finish();
      const double wb = slowest(ms_since(t0));
      const double ws = slowest(w);
      if (it < 2) continue;  // warm-up: connections, buffers
      alone.push_back(c), xfer.push_back(x), with.push_back(ws), both.push_back(wb);
    }
    if (rank == 0)
      std::printf("%s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f\n", transport,
                  static_cast<long long>(elems * 4), median(alone), median(xfer), median(with),
                  median(both), median(with) - median(alone));
  }
  close(fd);
  group.reset();
  dist::finalize_mpi();
  return 0;
}
