// SocketMesh::connect: every rank listens on an ephemeral port of all its interfaces and
// publishes the port, its IPv4 addresses and their netmasks (MPI_Allgather); rank i connects to
// every rank j > i and says who it is (rank 0's random job token and its rank), then accepts the
// ranks below it, checking each one's token. Connecting first and accepting after cannot
// deadlock: a connection completes in the listener's backlog before the peer accepts it. A rank
// accepting learns when every rank is done connecting (MPI_Iallreduce, tested between polls) and
// stops waiting if one failed. Every rank then learns whether all ranks connected
// (MPI_Allreduce), so they fail or go on together.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "dist/tcp/socket_mesh.h"
#include "lockstep/core/error.h"

namespace lockstep::dist::tcp {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kMaxAddresses = 8;

// What each rank publishes (network byte order for addresses and masks).
struct Card {
  std::uint64_t token = 0;  // rank 0's is the job's
  std::uint32_t port = 0;
  std::uint32_t count = 0;
  std::uint32_t addr[kMaxAddresses] = {};
  std::uint32_t mask[kMaxAddresses] = {};
};

struct Hello {
  std::uint64_t token;
  std::uint64_t rank;
};

std::string ip(std::uint32_t a) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr in{a};
  ::inet_ntop(AF_INET, &in, buf, sizeof buf);
  return buf;
}

int ms_left(Clock::time_point end) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

// This host's IPv4 addresses other than loopback (only `ifname`'s when given).
void fill_addresses(Card& card, const char* ifname, std::string& error) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    error = std::string("getifaddrs failed: ") + std::strerror(errno);
    return;
  }
  for (ifaddrs* i = list; i && card.count < kMaxAddresses; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    if (ifname ? std::strcmp(i->ifa_name, ifname) != 0 : (i->ifa_flags & IFF_LOOPBACK) != 0)
      continue;
    card.addr[card.count] = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    card.mask[card.count] =
        i->ifa_netmask ? reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr : 0;
    ++card.count;
  }
  ::freeifaddrs(list);
  if (ifname && card.count == 0)
    error = std::string("LOCKSTEP_SOCKET_IFNAME=") + ifname + " names no IPv4 interface that is up";
}

// A connected socket to addr:port within `seconds`, or -1 with `why` set.
int dial(std::uint32_t addr, std::uint32_t port, double seconds, std::string& why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = addr;
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    const auto end = Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
    do rc = ::poll(&p, 1, ms_left(end));  // a signal is not the end of the attempt
    while (rc < 0 && errno == EINTR);
    int err = 0;
    socklen_t len = sizeof err;
    if (rc == 0)
      err = ETIMEDOUT;
    else if (rc < 0)
      err = errno;
    else
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

// Writes or reads exactly n bytes on a non-blocking socket before `end`.
bool exchange(int fd, void* buf, std::size_t n, bool write, Clock::time_point end) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t k = write ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    pollfd pf{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    const int rc = ::poll(&pf, 1, ms_left(end));
    if (rc == 0 || (rc < 0 && errno != EINTR)) return false;
  }
  return true;
}

// Closes the listener however connect() ends (a throw from agree() included).
struct Listener {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ~Listener() {
    if (fd >= 0) ::close(fd);
  }
};

// Collective: every rank throws the lowest failing rank's `error` (none throws when none failed).
void agree(MPI_Comm comm, int rank, int size, const std::string& error,
           const std::vector<std::string>& names) {
  int failed = error.empty() ? size : rank;
  if (MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
    throw DistError("init_mpi: agreeing on the ranks' TCP connections (MPI_Allreduce) failed");
  if (failed == size) return;
  std::vector<char> text(1024, '\0');
  if (rank == failed) std::strncpy(text.data(), error.c_str(), text.size() - 1);
  MPI_Bcast(text.data(), static_cast<int>(text.size()), MPI_CHAR, failed, comm);
  throw DistError("init_mpi: " + names[static_cast<std::size_t>(failed)] + " " + text.data() +
                  ". Set LOCKSTEP_SOCKET_IFNAME to the network interface the hosts reach each "
                  "other on, or LOCKSTEP_MPI_DATA=mpi to move the collectives' data through MPI");
}

}  // namespace

std::unique_ptr<SocketMesh> SocketMesh::connect(MPI_Comm comm, int rank, int size, bool one_host,
                                                const std::vector<std::string>& names,
                                                double connect_s) {
  std::unique_ptr<SocketMesh> mesh(new SocketMesh(rank, names));
  std::string error;  // this rank's failure, if any
  Card mine;
  const Listener listening;
  const int listener = listening.fd;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  socklen_t len = sizeof any;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
      ::listen(listener, size) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&any), &len) != 0)
    error = std::string("cannot listen on a TCP port: ") + std::strerror(errno);
  mine.port = ntohs(any.sin_port);
  if (rank == 0) {
    std::random_device random;
    mine.token = (std::uint64_t{random()} << 32) ^ random();
  }
  if (error.empty()) fill_addresses(mine, std::getenv("LOCKSTEP_SOCKET_IFNAME"), error);
  agree(comm, rank, size, error, names);  // a rank that cannot listen or has no address
  std::vector<Card> cards(static_cast<std::size_t>(size));
  if (MPI_Allgather(&mine, sizeof(Card), MPI_BYTE, cards.data(), sizeof(Card), MPI_BYTE, comm) !=
      MPI_SUCCESS)
    throw DistError("init_mpi: exchanging the ranks' TCP addresses (MPI_Allgather) failed");
  const std::uint64_t token = cards[0].token;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(connect_s));

  // Connect to every higher rank: same-host loopback, then addresses sharing a subnet with one of
  // ours, then the rest.
  for (int j = rank + 1; j < size && error.empty(); ++j) {
    const Card& c = cards[static_cast<std::size_t>(j)];
    std::vector<std::uint32_t> order;
    if (one_host) order.push_back(htonl(INADDR_LOOPBACK));
    for (int pass = 0; pass < 2; ++pass)
      for (std::uint32_t a = 0; a < c.count; ++a) {
        bool near = false;
        for (std::uint32_t b = 0; b < mine.count; ++b)
          near = near || ((c.addr[a] ^ mine.addr[b]) & mine.mask[b]) == 0;
        if (near == (pass == 0)) order.push_back(c.addr[a]);
      }
    std::string tried;
    int fd = -1;
    for (std::uint32_t a : order) {
      std::string why;
      fd = dial(a, c.port, std::min(2000, ms_left(end)) / 1000.0, why);
      if (fd >= 0) break;
      tried +=
          (tried.empty() ? "" : ", ") + ip(a) + ":" + std::to_string(c.port) + " (" + why + ")";
    }
    Hello hello{token, static_cast<std::uint64_t>(rank)};
    if (fd >= 0 && !exchange(fd, &hello, sizeof hello, true, end)) {
      ::close(fd);
      fd = -1;
      tried += "; the connection closed before this rank could introduce itself";
    }
    if (fd < 0)
      error = "cannot open a TCP connection to " + names[static_cast<std::size_t>(j)] +
              (order.empty() ? ": it published no IPv4 address" : ": tried " + tried);
    mesh->peers_[static_cast<std::size_t>(j)].fd = fd;
  }
  // Every rank says whether it connected to the ranks above it (non-blocking), so that the ranks
  // accepting stop waiting at once when one could not, instead of after connect_s.
  int dial_failed = error.empty() ? 0 : 1;
  MPI_Request dialed = MPI_REQUEST_NULL;
  if (MPI_Iallreduce(MPI_IN_PLACE, &dial_failed, 1, MPI_INT, MPI_MAX, comm, &dialed) != MPI_SUCCESS)
    throw DistError("init_mpi: agreeing on the ranks' TCP connections (MPI_Iallreduce) failed");
  int all_dialed = 0;
  // Accept every lower rank.
  for (int accepted = 0; accepted < rank && error.empty();) {
    if (!all_dialed) MPI_Test(&dialed, &all_dialed, MPI_STATUS_IGNORE);
    if (all_dialed && dial_failed) break;  // agree() below names the rank that failed
    pollfd p{listener, POLLIN, 0};
    const int fd = ::poll(&p, 1, all_dialed ? ms_left(end) : std::min(10, ms_left(end))) > 0
                       ? ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)
                       : -1;
    if (fd < 0 && Clock::now() >= end) {
      error = "no connection from " + std::to_string(rank - accepted) + " lower rank(s) within " +
              std::to_string(static_cast<int>(connect_s)) + " s";
      break;
    }
    if (fd < 0) continue;
    // A stranger that connects and says nothing gets 2 s, not the whole start-up.
    Hello hello{};
    const auto said = std::min(end, Clock::now() + std::chrono::seconds(2));
    const bool ok = exchange(fd, &hello, sizeof hello, false, said) && hello.token == token &&
                    hello.rank < static_cast<std::uint64_t>(rank) &&
                    mesh->peers_[hello.rank].fd < 0;
    if (!ok) {  // not one of this job's ranks (or a duplicate): ignore it
      ::close(fd);
      continue;
    }
    mesh->peers_[hello.rank].fd = fd;
    ++accepted;
  }
  if (!all_dialed) MPI_Wait(&dialed, MPI_STATUS_IGNORE);
  for (auto& p : mesh->peers_) {
    const int one = 1;
    if (p.fd >= 0) ::setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  agree(comm, rank, size, error, names);
  return mesh;
}

}  // namespace lockstep::dist::tcp
