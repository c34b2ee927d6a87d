// The environment of every mpirun the mpi_cli tests start (test_mpi_cli runs mpirun itself, so
// ctest's ENVIRONMENT does not reach it): set when the program starts, by each test file that
// includes this. The same settings as LOCKSTEP_MPI_TEST_ENV in tests/CMakeLists.txt.
#pragma once

#include <cstdlib>

namespace lockstep::e2e {

/// Root may run mpirun here (CI containers), traffic stays on loopback, and 4 ranks may share 2
/// cores; under ASan, OpenMPI's own allocations at exit are not ours (tests/mpi/lsan.supp).
[[maybe_unused]] static const bool kMpiEnv = [] {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_btl_tcp_if_include", "lo", 1);
  setenv("OMPI_MCA_oob_tcp_if_include", "lo", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  setenv("OMPI_MCA_btl", "self,vader,tcp", 1);
  setenv("LSAN_OPTIONS", "suppressions=" LOCKSTEP_LSAN_SUPPRESSIONS ":fast_unwind_on_malloc=0", 1);
  return true;
}();

}  // namespace lockstep::e2e
