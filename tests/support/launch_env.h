// Test fixture for the launcher environment variables that dist::launch_local_rank() reads
// (OpenMPI, MPICH's Hydra, Slurm): each test starts with none of them set, and the process's own
// values are put back after it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

namespace lockstep::testing {

class LauncherEnvironment : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALRANKID",
                                           "MPI_LOCALNRANKS", "SLURM_LOCALID"};
  void SetUp() override {
    for (const char* n : kNames) {
      if (const char* v = std::getenv(n)) saved_[n] = v;
      ::unsetenv(n);
    }
  }
  void TearDown() override {
    for (const char* n : kNames) ::unsetenv(n);
    for (const auto& [n, v] : saved_) ::setenv(n.c_str(), v.c_str(), 1);
  }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }

 private:
  std::map<std::string, std::string> saved_;
};

}  // namespace lockstep::testing
