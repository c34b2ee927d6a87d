// profile_step: a driver for profilers (valgrind --tool=callgrind, perf) that runs N training
// steps of one of bench/workloads.h's workloads and nothing else worth measuring.
//
//   profile_step reference [steps=2000] [threads=1]
//   profile_step mlp       [steps=20]   [threads=1]
//
// threads: lockstep::set_num_threads for the run (default 1, so the profile is one thread's work).
//
// Ten warm-up steps run first (OpenBLAS start-up, lazy symbol binding, allocator growth). Under
// callgrind the timed steps are bracketed with CALLGRIND_TOGGLE_COLLECT, so with
// --collect-atstart=no the profile holds exactly the N steps and "Ir / N" is instructions per
// step. bench/profile_core.sh runs both workloads and prints the hotspots:
//   OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --collect-atstart=no
//       --callgrind-out-file=cg.ref build-bench/bench/profile_step reference 2000
//   callgrind_annotate --inclusive=no cg.ref | head -40
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/core/blas.h"
#include "lockstep/core/parallel.h"
#include "workloads.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define PROFILE_TOGGLE() CALLGRIND_TOGGLE_COLLECT
#else
#define PROFILE_TOGGLE() ((void)0)
#endif

int main(int argc, char** argv) {
  lockstep::reexec_with_openblas_kernels(argv);  // the CLI's kernels (lockstep/core/blas.h)
  std::string which = argc > 1 ? argv[1] : "reference";
  if (which != "reference" && which != "mlp") {
    std::fprintf(stderr, "usage: profile_step reference|mlp [steps] [threads]\n");
    return 2;
  }
  long steps = argc > 2 ? std::atol(argv[2]) : (which == "mlp" ? 20 : 2000);
  lockstep::set_num_threads(argc > 3 ? std::atoi(argv[3]) : 1);
  lockstep::bench::Workload w = which == "mlp" ? lockstep::bench::make_mlp_workload()
                                               : lockstep::bench::make_reference_workload();
  for (int i = 0; i < 10; ++i) w.step();  // warm-up, not collected
  lockstep::Tensor loss;
  PROFILE_TOGGLE();
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < steps; ++i) loss = w.step();
  PROFILE_TOGGLE();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count() / static_cast<double>(steps);
  std::printf("%s: %ld steps on %d thread(s), %.2f us/step, last loss %.6f\n", which.c_str(),
              steps, lockstep::get_num_threads(), us, loss.item());
  return 0;
}
