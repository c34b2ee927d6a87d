// bench_core: issue 2's three speed measurements of the single-device CPU engine.
//   BM_ReferenceStep  step_time (µs per training step) and samples/s, reference workload (batch 32)
//   BM_MLPStep        step_time and samples/s of the 784-256-256-10 MLP (batch 128)
//   BM_Matmul/n       flop = FLOP/s (2·n³/t, shown as G/s) of lockstep::matmul, float32,
//                     n = 256, 512, 1024
// All benchmarks use wall-clock time (UseRealTime): GEMMs may run on helper threads, whose CPU
// time the default per-thread CPU timer would not see.
//
//   bench_core [--threads=N] [Google Benchmark flags]
//
// --threads=N calls lockstep::set_num_threads(N) (intra-op threads of the main thread; Lockstep's
// default is the number of usable cores). Lockstep runs OpenBLAS single-threaded inside each call
// and splits large GEMMs over its own threads, so OPENBLAS_NUM_THREADS should not matter; the
// context line openblas_threads shows OpenBLAS's thread count after a first matmul, i.e. the
// effective one. bench/compare_core.sh runs this binary with --threads 1 and 2 (and
// OPENBLAS_NUM_THREADS 1 and 2) and compares against bench/pytorch_core.py.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "lockstep/core/blas.h"
#include "lockstep/core/parallel.h"
#include "workloads.h"

// OpenBLAS's own query functions (declared here so no <cblas.h> include path is needed; the
// library is already linked through lockstep).
extern "C" int openblas_get_num_threads(void);
extern "C" char* openblas_get_config(void);

namespace {

using lockstep::Tensor;
using lockstep::bench::Workload;

// Counter whose value is seconds per iteration (wall clock); the console shows it with an SI
// prefix, e.g. "step_time=9.55us", and JSON output holds it in seconds.
benchmark::Counter seconds_per_iter(const benchmark::State& state) {
  return benchmark::Counter(static_cast<double>(state.iterations()),
                            benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void run_steps(benchmark::State& state, Workload& w) {
  for (int i = 0; i < 3; ++i) w.step();  // warm-up: allocator, OpenBLAS thread start
  for (auto _ : state) {
    Tensor loss = w.step();
    benchmark::DoNotOptimize(loss.raw_data());
  }
  state.counters["step_time"] = seconds_per_iter(state);
  state.counters["samples"] = benchmark::Counter(
      static_cast<double>(state.iterations() * w.batch), benchmark::Counter::kIsRate);
}

void BM_ReferenceStep(benchmark::State& state) {
  Workload w = lockstep::bench::make_reference_workload();
  run_steps(state, w);
}
BENCHMARK(BM_ReferenceStep)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_MLPStep(benchmark::State& state) {
  Workload w = lockstep::bench::make_mlp_workload();
  run_steps(state, w);
}
BENCHMARK(BM_MLPStep)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_Matmul(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  lockstep::manual_seed(0);
  Tensor a = lockstep::randn({n, n}), b = lockstep::randn({n, n});
  for (int i = 0; i < 2; ++i) lockstep::matmul(a, b);  // warm-up
  for (auto _ : state) {
    Tensor c = lockstep::matmul(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  // Shown as e.g. "flop=64.4G/s"; JSON holds FLOP/s.
  state.counters["flop"] = benchmark::Counter(flop * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Matmul)->Arg(256)->Arg(512)->Arg(1024)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  lockstep::reexec_with_openblas_kernels(argv);  // the CLI's kernels (lockstep/core/blas.h)
  benchmark::Initialize(&argc, argv);
  // Our own flag: --threads=N (removed from argv before the unrecognised-argument check).
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--threads=", 10) == 0)
      lockstep::set_num_threads(std::atoi(argv[i] + 10));
    else
      argv[out++] = argv[i];
  }
  argc = out;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  {  // one small matmul so that OpenBLAS/Lockstep initialisation has happened before we report
    Tensor a = lockstep::ones({64, 64});
    lockstep::matmul(a, a);
  }
  benchmark::AddCustomContext("lockstep_threads", std::to_string(lockstep::get_num_threads()));
  benchmark::AddCustomContext("lockstep_usable_cores", std::to_string(lockstep::usable_cores()));
  const char* ob_env = std::getenv("OPENBLAS_NUM_THREADS");
  benchmark::AddCustomContext("OPENBLAS_NUM_THREADS", ob_env ? ob_env : "unset");
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("lockstep_version", LOCKSTEP_VERSION);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
