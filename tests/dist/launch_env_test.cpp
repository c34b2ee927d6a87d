// dist::launch_local_rank(): the node-local rank and size an MPI launcher puts in the
// environment (OpenMPI, MPICH's Hydra, Slurm), which `lockstep train --backend nccl` uses to pick
// cuda:(local rank). The variables are set and restored by each test.
#include "support/launch_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "lockstep/dist/mpi.h"
#include "support/helpers.h"

namespace lockstep::testing {
namespace {

class LaunchEnv : public LauncherEnvironment {};

TEST_F(LaunchEnv, NoLauncherNoLocalRank) { EXPECT_FALSE(dist::launch_local_rank().has_value()); }

TEST_F(LaunchEnv, OpenMpi) {
  set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  const auto r = dist::launch_local_rank();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->size, 4);
}

TEST_F(LaunchEnv, MpichAndSlurm) {
  set("MPI_LOCALRANKID", "1");
  set("MPI_LOCALNRANKS", "2");
  auto r = dist::launch_local_rank();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->size, 2);
  ::unsetenv("MPI_LOCALRANKID");
  ::unsetenv("MPI_LOCALNRANKS");
  set("SLURM_LOCALID", "5");
  r = dist::launch_local_rank();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->size, -1);  // srun does not say
  // OpenMPI's variables come first when several launchers' are present.
  set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  EXPECT_EQ(dist::launch_local_rank()->rank, 0);
}

TEST_F(LaunchEnv, MalformedValuesAreValueErrorsNamingTheVariable) {
  for (const char* bad : {"", "x", "-1", "2.5", "1 ", "99999999999"}) {
    set("OMPI_COMM_WORLD_LOCAL_RANK", bad);
    expect_error<ValueError>([] { (void)dist::launch_local_rank(); },
                             {"OMPI_COMM_WORLD_LOCAL_RANK=", "integer"});
  }
  set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "0");
  expect_error<ValueError>([] { (void)dist::launch_local_rank(); },
                           {"OMPI_COMM_WORLD_LOCAL_SIZE=0", ">= 1"});
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  expect_error<ValueError>([] { (void)dist::launch_local_rank(); },
                           {"OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2"});
}

// One process per GPU: local rank r trains on cuda:r; more ranks on the node than GPUs is a
// DeviceError naming both counts (what `lockstep train --backend nccl` reports under mpirun).
TEST(LocalRankDevice, RankRUsesCudaR) {
  EXPECT_EQ(dist::local_rank_device({.rank = 0, .size = 1}, 1).str(), "cuda:0");
  EXPECT_EQ(dist::local_rank_device({.rank = 1, .size = 2}, 8).str(), "cuda:1");
  EXPECT_EQ(dist::local_rank_device({.rank = 3, .size = -1}, 4).str(), "cuda:3");
}

TEST(LocalRankDevice, MoreRanksThanGpusIsRefusedNamingTheCounts) {
  // Every rank of the node refuses, also those whose own GPU would exist.
  for (int rank : {0, 2})
    expect_error<DeviceError>(
        [&] { (void)dist::local_rank_device({.rank = rank, .size = 3}, 2); },
        {"3 ranks on this node", "only 2 GPUs (cuda:0..cuda:1)", "at most 2 ranks per node"});
  expect_error<DeviceError>([] { (void)dist::local_rank_device({.rank = 1, .size = -1}, 1); },
                            {"local rank 1", "only 1 GPU (cuda:0)"});
  expect_error<DeviceError>([] { (void)dist::local_rank_device({.rank = 0, .size = 1}, 0); },
                            {"1 rank on this node", "no GPU"});
}

}  // namespace
}  // namespace lockstep::testing
