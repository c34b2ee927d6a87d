// mpi_fault: a small MPI job in which rank 1 fails before a collective, for the fault tests
// (tests/mpi/fault_test.sh runs it under mpirun and checks the exit status, the time and the
// output). Usage: mpi_fault MODE TIMEOUT_SECONDS, MODE one of
//   stop   rank 1 stops itself (SIGSTOP); the others must throw TimeoutError naming rank 1 after
//          TIMEOUT_SECONDS (+ the roll call); rank 2, if any, enters the collective 1 s late and
//          must fail on rank 0's roll call instead of waiting out its own timeout
//   exit   rank 1 exits with status 3 (no MPI_Finalize)
//   throw  rank 1 throws a DataError nobody catches (std::terminate, SIGABRT)
//   kill   rank 1 kills itself (SIGKILL)
// In the last three, mpirun must end the job long before TIMEOUT_SECONDS. MODE with "_async"
// appended (stop_async, notify_async): the survivors start the collective with all_reduce_async
// and the failure must come out of its wait(). Bad set-ups of the data path (socket_mesh.h), every
// rank printing init_mpi's or the collective's error:
//   data_env   LOCKSTEP_MPI_DATA=bogus on every rank
//   one_env    LOCKSTEP_MPI_DATA=bogus on rank 1 only (the others must throw too, naming it)
//   split_env  LOCKSTEP_MPI_DATA=mpi on rank 1 only
//   ifname     LOCKSTEP_SOCKET_IFNAME=nosuch0 on rank 1 only
//   mismatch   argument checks off, rank 1 all-reduces 999 elements where the others take 1000
// When init_mpi throws, the ranks also compare how many TCP sockets each still listens on (the
// data path's listener must be closed on every rank, not only on the one that failed).
// Every rank writes its pid to $MPI_FAULT_PID_DIR/pid.RANK (when set), so the script can clean
// up a rank that is still stopped. Survivors print one line per event, prefixed "rank R:", and
// exit with status 4 (the CLI's status for a distributed failure).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

// How many TCP sockets this process listens on, from /proc/self/fd and /proc/net/tcp (Open MPI's
// own and, while init_mpi runs, the data path's).
int listening_sockets() {
  std::set<std::string> inodes;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string link = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
  }
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  int count = 0;
  std::getline(tcp, line);
  while (std::getline(tcp, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state == "0A" && inodes.count(inode)) ++count;
  }
  return count;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: mpi_fault stop|exit|throw|kill|notify[_async]|data_env|one_env|split_env|ifname|"
                 "mismatch TIMEOUT_SECONDS\n");
    return 2;
  }
  std::string mode = argv[1];
  const bool async = mode.size() > 6 && mode.ends_with("_async");
  if (async) mode.resize(mode.size() - 6);
  const double timeout = std::atof(argv[2]);
  const char* rank_env = std::getenv("OMPI_COMM_WORLD_RANK");
  const bool rank1 = rank_env && std::string(rank_env) == "1";
  if (mode == "data_env" || (mode == "one_env" && rank1)) setenv("LOCKSTEP_MPI_DATA", "bogus", 1);
  if (mode == "split_env" && rank1) setenv("LOCKSTEP_MPI_DATA", "mpi", 1);
  if (mode == "ifname" && rank1) setenv("LOCKSTEP_SOCKET_IFNAME", "nosuch0", 1);
  // Start-up (all ranks in, pids written) with a long timeout, then the short one under test.
  std::shared_ptr<dist::ProcessGroup> g;
  try {
    g = dist::init_mpi({.timeout_seconds = 60});
  } catch (const Error& e) {
    std::printf("rank %s: init_mpi threw: %s\n", rank_env ? rank_env : "?", e.what());
    // Every rank closed the data path's listener (MPI itself still works): as many as the others.
    int counts[2] = {listening_sockets(), 0};
    counts[1] = -counts[0];
    MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    std::printf("rank %s: TCP listeners after the failure: %s\n", rank_env ? rank_env : "?",
                counts[0] == -counts[1] ? "as many as on every rank" : "more on some ranks");
    std::fflush(stdout);
    // Let the other ranks print theirs before this exit makes mpirun end the job.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 4;
  }
  const int rank = g->rank();
  if (const char* dir = std::getenv("MPI_FAULT_PID_DIR"))
    std::ofstream(std::string(dir) + "/pid." + std::to_string(rank)) << getpid() << "\n";
  g->barrier();
  dist::init_mpi({.timeout_seconds = timeout, .check_arguments = mode != "mismatch"});

  if (rank == 1) {
    if (mode == "stop") std::raise(SIGSTOP);
    if (mode == "exit") std::exit(3);
    if (mode == "throw") throw DataError("mpi_fault: rank 1 read a malformed sample");
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "notify") {  // what `lockstep train` does for a rank's own error
      dist::notify_failure(2, "mpi_fault: rank 1 read a malformed sample");
      std::fflush(nullptr);
      std::_Exit(2);
    }
  }
  if (mode == "stop" && rank == 2) std::this_thread::sleep_for(std::chrono::seconds(1));

  const auto t0 = std::chrono::steady_clock::now();
  Tensor x = full({mode == "mismatch" && rank == 1 ? 999 : 1000}, 1.0);
  try {
    if (async)
      g->all_reduce_async(x)->wait();
    else
      g->all_reduce(x);
    std::printf("rank %d: all_reduce returned (no failure seen)\n", rank);
    dist::finalize_mpi();
    return 0;
  } catch (const PeerFailedError& e) {
    std::printf("rank %d: PeerFailedError after %.1f s: %s (rank %d, status %d)\n", rank, since(t0),
                e.what(), e.rank(), e.status());
  } catch (const TimeoutError& e) {
    std::printf("rank %d: TimeoutError after %.1f s: %s\n", rank, since(t0), e.what());
  } catch (const DistError& e) {
    std::printf("rank %d: DistError after %.1f s: %s\n", rank, since(t0), e.what());
  }
  std::string silent;
  for (int r : dist::mpi_unresponsive_ranks()) silent += " " + std::to_string(r);
  std::printf("rank %d: unresponsive:%s\n", rank, silent.c_str());
  const auto t1 = std::chrono::steady_clock::now();
  try {
    g->barrier();
    std::printf("rank %d: barrier after the failure returned\n", rank);
  } catch (const DistError& e) {
    std::printf("rank %d: after the failure, DistError in %.3f s: %s\n", rank, since(t1), e.what());
  }
  std::fflush(stdout);
  // Let the other survivors print before this exit makes mpirun end the job.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  dist::finalize_mpi();  // does nothing after a failure
  return 4;
}
