// Breaker probes of dist::launch_local_rank() / dist::local_rank_device() (src/dist/launch_env.cpp)
// with odd environments: MPICH's and Slurm's variables malformed or inconsistent, the largest
// accepted value, a local rank far beyond the GPUs (a DeviceError, never cuda:huge), and
// LocalRank values no launcher gives (a ValueError, never cuda:-1).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "lockstep/dist/mpi.h"
#include "support/helpers.h"
#include "support/launch_env.h"

namespace lockstep::testing {
namespace {

class LaunchEnvBreak : public LauncherEnvironment {};

TEST_F(LaunchEnvBreak, MpichSizeAtOrBelowRankAndMalformedSizeNameTheVariables) {
  set("MPI_LOCALRANKID", "2");
  set("MPI_LOCALNRANKS", "2");
  expect_error<ValueError>([] { (void)dist::launch_local_rank(); },
                           {"MPI_LOCALRANKID=2", "MPI_LOCALNRANKS=2", "below the local size"});
  for (const char* bad : {"-3", "two", "0", ""}) {
    set("MPI_LOCALNRANKS", bad);
    expect_error<ValueError>([] { (void)dist::launch_local_rank(); },
                             {std::string("MPI_LOCALNRANKS=") + bad, ">= 1"});
  }
}

TEST_F(LaunchEnvBreak, MalformedSlurmValuesAreValueErrors) {
  // A leading blank or '+' is not a launcher's value either (strtol alone would take them).
  for (const char* bad : {"-1", "abc", "3x", "4294967296", " 1", "+1", "\t2", "-", " "}) {
    set("SLURM_LOCALID", bad);
    expect_error<ValueError>([] { (void)dist::launch_local_rank(); },
                             {std::string("SLURM_LOCALID=") + bad, "integer >= 0"});
  }
}

// A size without a rank says nothing: OpenMPI's size alone does not hide MPICH's rank.
TEST_F(LaunchEnvBreak, ASizeWithoutItsRankIsIgnored) {
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  EXPECT_FALSE(dist::launch_local_rank().has_value());
  set("MPI_LOCALRANKID", "1");
  const auto r = dist::launch_local_rank();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->size, -1);
}

// The largest accepted value (2^30) parses; the device pick then refuses it by the GPU count.
TEST_F(LaunchEnvBreak, HugeLocalRankIsRefusedByTheDevicePick) {
  set("SLURM_LOCALID", "1073741824");
  const auto r = dist::launch_local_rank();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 1 << 30);
  expect_error<DeviceError>([&] { (void)dist::local_rank_device(*r, 8); },
                            {"local rank 1073741824", "only 8 GPUs"});
  set("SLURM_LOCALID", "1073741825");
  expect_error<ValueError>([] { (void)dist::launch_local_rank(); }, {"SLURM_LOCALID="});
}

// A LocalRank that no launcher gives (negative rank, rank at or above the size, a size of 0)
// is a ValueError naming the values, not cuda:-1 or a GPU of another rank's.
TEST(LocalRankDeviceBreak, InconsistentLocalRankIsAValueError) {
  expect_error<ValueError>([] { (void)dist::local_rank_device({.rank = -1, .size = 2}, 4); },
                           {"local rank -1"});
  expect_error<ValueError>([] { (void)dist::local_rank_device({.rank = -1, .size = -1}, 4); },
                           {"local rank -1"});
  expect_error<ValueError>([] { (void)dist::local_rank_device({.rank = 3, .size = 2}, 4); },
                           {"local rank 3", "local size 2"});
  expect_error<ValueError>([] { (void)dist::local_rank_device({.rank = 0, .size = 0}, 4); },
                           {"local size 0"});
  // Consistent values still pick cuda:rank.
  EXPECT_EQ(dist::local_rank_device({.rank = 1, .size = 2}, 4).str(), "cuda:1");
}

}  // namespace
}  // namespace lockstep::testing
