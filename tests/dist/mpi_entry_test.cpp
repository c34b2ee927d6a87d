// The entry points of lockstep/dist/mpi.h that work in every build, with or without the mpi
// backend (its collectives are tested under mpirun by tests/mpi).
#include <gtest/gtest.h>

#include <cstdlib>

#include "support/helpers.h"

namespace lockstep::testing {
namespace {

TEST(MpiEntry, LaunchedByMpiReadsTheLaunchersEnvironment) {
  const char* names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* n : names)
    if (const char* v = std::getenv(n)) saved.emplace_back(n, v);
  for (const char* n : names) unsetenv(n);
  EXPECT_FALSE(dist::launched_by_mpi());
  for (const char* n : names) {
    setenv(n, "2", 1);
    EXPECT_TRUE(dist::launched_by_mpi()) << n;
    unsetenv(n);
  }
  for (const auto& [n, v] : saved) setenv(n.c_str(), v.c_str(), 1);
}

TEST(MpiEntry, InitWithoutTheBackendNamesTheCMakeOption) {
  if (dist::mpi_available()) GTEST_SKIP() << "this build has the mpi backend (tests/mpi)";
  expect_error<DistError>([] { dist::init_mpi(); },
                          {"no MPI backend", "-DLOCKSTEP_MPI=ON", "libopenmpi-dev"});
  dist::finalize_mpi();  // a no-op
  EXPECT_TRUE(dist::mpi_unresponsive_ranks().empty());
}

}  // namespace
}  // namespace lockstep::testing
