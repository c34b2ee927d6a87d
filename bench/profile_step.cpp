// profile_step: a driver for profilers (valgrind --tool=callgrind, perf) that runs N training
// steps of one of bench/workloads.h's workloads and nothing else worth measuring.
//
//   profile_step reference [steps=2000]
//   profile_step mlp       [steps=200]
//
// Typical use (bench/profile_core.sh does this):
//   OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=cg.ref
//       build-bench/bench/profile_step reference 2000   (one command line)
//   callgrind_annotate --inclusive=no cg.ref | head -40
#include <cstdio>
#include <cstdlib>
#include <string>

#include "workloads.h"

int main(int argc, char** argv) {
  std::string which = argc > 1 ? argv[1] : "reference";
  if (which != "reference" && which != "mlp") {
    std::fprintf(stderr, "usage: profile_step reference|mlp [steps]\n");
    return 2;
  }
  long steps = argc > 2 ? std::atol(argv[2]) : (which == "mlp" ? 200 : 2000);
  lockstep::bench::Workload w = which == "mlp" ? lockstep::bench::make_mlp_workload()
                                               : lockstep::bench::make_reference_workload();
  double last = 0;
  for (long i = 0; i < steps; ++i) last = w.step().item();
  std::printf("%s: %ld steps, last loss %.6f\n", which.c_str(), steps, last);
  return 0;
}
