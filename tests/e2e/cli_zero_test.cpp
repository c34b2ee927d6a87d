// `lockstep train --zero` in one process (training across ranks: tests/mpi_cli/zero_mpi_test.cpp):
// there is nothing to shard, so the run is the plain optimizer's, file for file; --cuda-graphs
// is refused with it (exit 2).
#include "cli_support.h"

namespace lockstep::e2e {
namespace {

TEST(CliZero, OneProcessIsThePlainOptimizer) {
  TempDir dir;
  for (const std::string zero : {"", "--zero"}) {
    std::vector<std::string> args{"train",
                                  "--epochs",
                                  "2",
                                  "--batch-size",
                                  "32",
                                  "--optimizer",
                                  "adam",
                                  "--devices",
                                  "cpu:0,cpu:1",
                                  "--checkpoint-dir",
                                  dir / ("ck" + zero),
                                  "--save",
                                  dir / ("w" + zero),
                                  "--quiet"};
    if (!zero.empty()) args.push_back(zero);
    RunResult r = lockstep(args);
    ASSERT_EQ(r.status, 0) << r.err;
  }
  EXPECT_EQ(read_text(dir / "w"), read_text(dir / "w--zero"));
  EXPECT_EQ(read_text(dir / "ck/epoch-0002.safetensors"),
            read_text(dir / "ck--zero/epoch-0002.safetensors"));
}

TEST(CliZero, RefusedWithCudaGraphs) {
  expect_error({"train", "--epochs", "1", "--zero", "--cuda-graphs", "--quiet"},
               {"--zero cannot be used with --cuda-graphs"});
}

TEST(CliZero, HelpDescribesTheFlag) {
  RunResult r = lockstep({"train", "--help"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--zero"), std::string::npos);
  EXPECT_NE(r.out.find("ZeroRedundancyOptimizer"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace lockstep::e2e
