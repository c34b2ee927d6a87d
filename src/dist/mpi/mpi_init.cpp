// init_mpi / finalize_mpi: MPI is started once per process and the one group of all ranks is
// kept for the life of the process (never destroyed: nothing may call MPI during exit).
#include <cmath>

#include "dist/mpi/mpi_group.h"

namespace lockstep::dist {

namespace {

struct State {
  std::mutex mu;
  std::shared_ptr<mpi_detail::MpiGroup> group;
};

State& state() {
  static auto* s = new State;  // intentionally leaked: see above
  return *s;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// A duplicate of MPI_COMM_WORLD whose errors are returned, not fatal.
MPI_Comm duplicate_world(const char* purpose) {
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS)
    throw DistError(std::string("init_mpi: MPI_Comm_dup of MPI_COMM_WORLD (") + purpose +
                    ") failed: " + mpi_detail::error_string(rc));
  return comm;
}

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<ProcessGroup> init_mpi(MpiOptions options) {
  if (!(options.timeout_seconds > 0))  // also rejects NaN
    throw ValueError("init_mpi: timeout_seconds must be > 0, got " +
                     std::to_string(options.timeout_seconds));
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw DistError(
        "init_mpi: MPI was finalised in this process (finalize_mpi); it cannot start "
        "again");
  if (st.group) {
    st.group->set_options(options);
    return st.group;
  }
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      throw DistError("init_mpi: MPI_Init_thread failed: " + mpi_detail::error_string(rc));
  } else {
    MPI_Query_thread(&provided);
  }
  // Every MPI call of the group is made under its mutex, so SERIALIZED is enough.
  if (provided < MPI_THREAD_SERIALIZED)
    throw DistError(std::string("init_mpi: MPI provides ") + thread_level_name(provided) +
                    "; Lockstep needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE");
  MPI_Comm comm = duplicate_world("collectives");
  MPI_Comm roll = duplicate_world("roll call");
  st.group = std::make_shared<mpi_detail::MpiGroup>(comm, roll, options);
  return st.group;
}

void finalize_mpi() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.group) return;  // init_mpi never succeeded
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (st.group->shutdown()) MPI_Finalize();
}

void notify_failure(int status, const std::string& message, double wait_seconds) {
  std::shared_ptr<mpi_detail::MpiGroup> group;
  {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    group = st.group;
  }
  if (group) group->notify_failure(status, message, wait_seconds);
}

std::vector<int> mpi_unresponsive_ranks() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.group ? st.group->unresponsive_ranks() : std::vector<int>{};
}

std::vector<std::string> mpi_hosts() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  return st.group ? st.group->hosts() : std::vector<std::string>{};
}

}  // namespace lockstep::dist
