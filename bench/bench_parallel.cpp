// bench_parallel: issue 3's speed measurements of DataParallel on CPU devices.
//
// Workloads (bench/workloads.h): "ref" = Linear(10,5)-ReLU-Linear(5,2), batch 32; "mlp" =
// 784-256-256-10 MLP, global batch 128; CrossEntropyLoss, SGD lr 0.01, one fixed synthetic batch.
// Every benchmark is one training step per iteration, wall clock (UseRealTime), and reports
//   step_time   seconds per step (console: e.g. "step_time=1.23ms")
//   samples     samples per second (global batch / step time)
//   bytes_moved DataParallel::bytes_moved_last_step() (parameter copies to replicas + gradient
//               bytes all-reduced), 0 for the plain model
//
// Configurations (benchmark names; W = ref | mlp):
//   W/single/threads:T          plain model, lockstep::set_num_threads(T), T = 1, 2:
//                               optimizer.zero_grad(); loss(model(x), y).backward(); step()
//   W/dp1/threads:T             DataParallel on {cpu:0}, threads_per_device = T, reducer path:
//                               optimizer.zero_grad(); dp.forward_backward(x, y, CE); step()
//   W/dp2/overlap:O             DataParallel on {cpu:0, cpu:1}, 1 thread per device, reducer
//                               overlap on (1) / off (0), default 25 MB buckets
//   W/dp2/overlap:1/bucket:64KB as above with bucket_cap_bytes = 64 KiB (several buckets, so
//                               all-reduce can overlap backward; at 25 MB the MLP is one bucket)
//   W/dp2/deterministic         DataParallel on 2 devices, deterministic = true (shard_size 8)
//   W/dp2/gather                DataParallel on 2 devices, PyTorch's path:
//                               loss(dp(x), y).backward()
// In the dp configurations the main thread keeps its default intra-op threads (usable cores), as
// in the CLI: it waits while the replicas' workers run forward and backward, then runs the
// optimizer step (--main-threads=N changes its thread count).
//
//   bench_parallel [Google Benchmark flags]
//   bench_parallel --phases=mlp|ref [--steps=N] [--overlap=0|1] [--main-threads=N]
//   bench_parallel --run=W/CONFIG [--steps=N]     e.g. --run=mlp/dp2/overlap:0 --steps=500
//   (--run also knows W/half/threads:1, the plain model on half the batch: two such processes
//   pinned to one core each give the compute-only ceiling of 2-device DataParallel, every
//   replica's own forward and backward with nothing copied, reduced or waited for)
//
// --run runs 10 warm-up steps and N steps of one configuration and prints µs/step, nothing else:
// the driver for perf and valgrind --tool=callgrind. (Callgrind's collection toggle acts on the
// calling thread only, and DataParallel works on its worker threads, so profile two step counts
// with collection on from the start and take the difference per function.)
// --phases prints a per-phase breakdown of one step instead of running the benchmarks (the
// profiling mode of bench/compare_parallel.sh): for the plain model at 1 thread and for
// DataParallel on 2 devices it timestamps, on every thread, the start of each replica's
// forward, the loss call, the last gradient hook of backward, and on the main thread
// zero_grad / forward_backward / step, and prints the median over N steps of each phase.
// bench/compare_parallel.sh builds this in Release and runs it next to bench/pytorch_ddp.py.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/core/blas.h"
#include "lockstep/core/parallel.h"
#include "workloads.h"

extern "C" int openblas_get_num_threads(void);

namespace {

// --main-threads=N: the main thread's intra-op threads in the dp configurations (default: usable
// cores, as in the CLI).
int g_main_threads = 0;
int main_threads() { return g_main_threads > 0 ? g_main_threads : lockstep::usable_cores(); }

using lockstep::Tensor;
using lockstep::bench::Workload;
namespace nn = lockstep::nn;

benchmark::Counter seconds_per_iter(const benchmark::State& state) {
  return benchmark::Counter(static_cast<double>(state.iterations()),
                            benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

Workload make(const std::string& w) {
  return w == "mlp" ? lockstep::bench::make_mlp_workload()
                    : lockstep::bench::make_reference_workload();
}

void finish(benchmark::State& state, std::int64_t batch, std::int64_t bytes) {
  state.counters["step_time"] = seconds_per_iter(state);
  state.counters["samples"] = benchmark::Counter(static_cast<double>(state.iterations() * batch),
                                                 benchmark::Counter::kIsRate);
  state.counters["bytes_moved"] = static_cast<double>(bytes);
}

// ---- the plain model --------------------------------------------------------------------------

void bm_single(benchmark::State& state, std::string w, int threads) {
  lockstep::set_num_threads(threads);
  Workload wl = make(w);
  for (int i = 0; i < 3; ++i) wl.step();
  for (auto _ : state) {
    Tensor loss = wl.step();
    benchmark::DoNotOptimize(loss.raw_data());
  }
  finish(state, wl.batch, 0);
}

// ---- DataParallel -----------------------------------------------------------------------------

struct DpConfig {
  int devices = 2;
  int threads_per_device = 1;
  bool overlap = true;
  std::int64_t bucket_cap = 25 * 1024 * 1024;
  bool deterministic = false;
  bool gather = false;  // forward + loss.backward() instead of forward_backward
};

std::vector<lockstep::Device> cpus(int n) {
  std::vector<lockstep::Device> d;
  for (int i = 0; i < n; ++i) d.push_back(lockstep::cpu(i));
  return d;
}

nn::DataParallel make_dp(Workload& wl, const DpConfig& c) {
  lockstep::parallel::DataParallelOptions opts;
  opts.threads_per_device = c.threads_per_device;
  opts.reducer.overlap = c.overlap;
  opts.reducer.bucket_cap_bytes = c.bucket_cap;
  opts.deterministic = c.deterministic;
  return nn::DataParallel(wl.model, cpus(c.devices), std::nullopt, opts);
}

Tensor dp_step(Workload& wl, nn::DataParallel& dp, const DpConfig& c) {
  wl.optimizer->zero_grad();
  Tensor loss;
  if (c.gather) {
    loss = wl.criterion(dp.forward(wl.x), wl.y);
    loss.backward();
  } else {
    loss = dp.forward_backward(wl.x, wl.y, nn::CrossEntropyLoss());
  }
  wl.optimizer->step();
  return loss;
}

void bm_dp(benchmark::State& state, std::string w, DpConfig c) {
  lockstep::set_num_threads(main_threads());
  Workload wl = make(w);
  nn::DataParallel dp = make_dp(wl, c);
  for (int i = 0; i < 3; ++i) dp_step(wl, dp, c);
  for (auto _ : state) {
    Tensor loss = dp_step(wl, dp, c);
    benchmark::DoNotOptimize(loss.raw_data());
  }
  finish(state, wl.batch, dp.bytes_moved_last_step());
}

// One configuration by its benchmark name (without the workload), as a step function.
struct Stepper {
  std::function<void()> step;
  std::int64_t batch = 0;
};
Stepper make_stepper(const std::string& w, const std::string& cfg) {
  auto wl = std::make_shared<Workload>(make(w));
  Stepper s{nullptr, wl->batch};
  if (cfg.rfind("single/threads:", 0) == 0) {
    lockstep::set_num_threads(std::atoi(cfg.c_str() + 15));
    s.step = [wl] { wl->step(); };
    return s;
  }
  if (cfg == "half/threads:1") {  // the plain model on the first half of the batch
    lockstep::set_num_threads(1);
    wl->batch /= 2;
    wl->x = lockstep::narrow(wl->x, 0, 0, wl->batch).clone();
    wl->y = lockstep::narrow(wl->y, 0, 0, wl->batch).clone();
    s.batch = wl->batch;
    s.step = [wl] { wl->step(); };
    return s;
  }
  DpConfig c;
  const std::string& base = cfg;
  if (base.rfind("dp1/threads:", 0) == 0) {
    c.devices = 1;
    c.threads_per_device = std::atoi(base.c_str() + 12);
  } else if (base == "dp2/overlap:1" || base == "dp2/overlap:0") {
    c.overlap = base.back() == '1';
  } else if (base == "dp2/overlap:1/bucket:64KB") {
    c.bucket_cap = 64 * 1024;
  } else if (base == "dp2/deterministic") {
    c.deterministic = true;
  } else if (base == "dp2/gather") {
    c.gather = true;
  } else {
    throw lockstep::ValueError("unknown configuration " + cfg);
  }
  lockstep::set_num_threads(main_threads());
  auto dp = std::make_shared<nn::DataParallel>(wl->model, cpus(c.devices), std::nullopt, [&] {
    lockstep::parallel::DataParallelOptions o;
    o.threads_per_device = c.threads_per_device;
    o.reducer.overlap = c.overlap;
    o.reducer.bucket_cap_bytes = c.bucket_cap;
    o.deterministic = c.deterministic;
    return o;
  }());
  s.step = [wl, dp, c] { dp_step(*wl, *dp, c); };
  return s;
}

void register_all() {
  for (std::string w : {"ref", "mlp"}) {
    auto reg = [&](const std::string& name, auto fn) {
      benchmark::RegisterBenchmark((w + "/" + name).c_str(), fn)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    };
    for (int t : {1, 2})
      reg("single/threads:" + std::to_string(t),
          [w, t](benchmark::State& s) { bm_single(s, w, t); });
    for (int t : {1, 2}) {
      DpConfig c{.devices = 1, .threads_per_device = t};
      reg("dp1/threads:" + std::to_string(t), [w, c](benchmark::State& s) { bm_dp(s, w, c); });
    }
    for (int o : {1, 0}) {
      DpConfig c{.devices = 2, .threads_per_device = 1, .overlap = o == 1};
      reg("dp2/overlap:" + std::to_string(o), [w, c](benchmark::State& s) { bm_dp(s, w, c); });
    }
    {
      DpConfig c{.devices = 2, .threads_per_device = 1, .overlap = true, .bucket_cap = 64 * 1024};
      reg("dp2/overlap:1/bucket:64KB", [w, c](benchmark::State& s) { bm_dp(s, w, c); });
    }
    {
      DpConfig c{.devices = 2, .threads_per_device = 1, .deterministic = true};
      reg("dp2/deterministic", [w, c](benchmark::State& s) { bm_dp(s, w, c); });
    }
    {
      DpConfig c{.devices = 2, .threads_per_device = 1, .gather = true};
      reg("dp2/gather", [w, c](benchmark::State& s) { bm_dp(s, w, c); });
    }
  }
}

// ---- --phases: per-phase timing of one step ---------------------------------------------------

using Clock = std::chrono::steady_clock;
double now_us() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

// Per-thread event times of the current step, indexed by the thread's slot (the main thread and
// each replica worker get their own slot the first time they record).
enum Event { kFwdStart, kLossStart, kLossEnd, kLastGrad, kNumEvents };
struct Slot {
  double t[kNumEvents] = {};
};
std::mutex g_slots_mu;
std::map<std::thread::id, int> g_slot_of;
std::vector<Slot> g_slots(8);

Slot& my_slot() {
  thread_local int idx = -1;
  if (idx < 0) {
    std::lock_guard<std::mutex> lock(g_slots_mu);
    idx = static_cast<int>(g_slot_of.size());
    g_slot_of[std::this_thread::get_id()] = idx;
  }
  return g_slots.at(static_cast<std::size_t>(idx));
}

// The workload's model with a timestamp at the start of forward (Cloneable, so DataParallel can
// replicate it; every replica records into its worker thread's slot).
struct ProbedMLP : nn::Cloneable<ProbedMLP> {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  bool mlp = true;
  explicit ProbedMLP(bool is_mlp) : mlp(is_mlp) { reset(); }
  void reset() override {
    if (mlp) {
      fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 256));
      fc2 = register_module("fc2", std::make_shared<nn::Linear>(256, 256));
      fc3 = register_module("fc3", std::make_shared<nn::Linear>(256, 10));
    } else {
      fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 5));
      fc2 = register_module("fc2", std::make_shared<nn::Linear>(5, 2));
      fc3.reset();
    }
  }
  Tensor forward(const Tensor& input) override {
    my_slot().t[kFwdStart] = now_us();
    Tensor x = lockstep::relu(fc1->forward(input));
    if (!mlp) return fc2->forward(x);
    x = lockstep::relu(fc2->forward(x));
    return fc3->forward(x);
  }
};

Tensor probed_loss(const Tensor& out, const Tensor& y) {
  Slot& s = my_slot();
  s.t[kLossStart] = now_us();
  Tensor l = lockstep::cross_entropy(out, y);
  s.t[kLossEnd] = now_us();
  return l;
}

void hook_last_grad(const std::vector<Tensor>& params) {
  for (Tensor p : params)
    p.register_post_accumulate_grad_hook([](Tensor&) { my_slot().t[kLastGrad] = now_us(); });
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct PhaseTable {
  std::vector<std::string> names;
  std::map<std::string, std::vector<double>> v;
  void add(const std::string& n, double x) {
    if (!v.count(n)) names.push_back(n);
    v[n].push_back(x);
  }
  void print(const char* title) const {
    std::printf("\n%s (median over steps, µs)\n", title);
    for (const auto& n : names) std::printf("  %-44s %9.1f\n", n.c_str(), median(v.at(n)));
  }
};

int run_phases(const std::string& w, int steps, bool overlap) {
  const bool is_mlp = w == "mlp";
  const std::int64_t batch = is_mlp ? 128 : 32, in = is_mlp ? 784 : 10, classes = is_mlp ? 10 : 2;
  auto make_model = [&] {
    lockstep::manual_seed(0);
    return std::make_shared<ProbedMLP>(is_mlp);
  };
  lockstep::manual_seed(1);
  Tensor x = lockstep::randn({batch, in}), y = lockstep::randint(0, classes, {batch});

  {  // the plain model, 1 thread
    lockstep::set_num_threads(1);
    auto model = make_model();
    lockstep::optim::SGD opt(model->parameters(), lockstep::optim::SGDOptions{.lr = 0.01});
    hook_last_grad(model->parameters());
    PhaseTable t;
    for (int i = 0; i < steps + 10; ++i) {
      double t0 = now_us();
      opt.zero_grad();
      double t1 = now_us();
      Tensor loss = probed_loss(model->forward(x), y);
      loss.backward();
      double t2 = now_us();
      opt.step();
      double t3 = now_us();
      if (i < 10) continue;
      const Slot& s = my_slot();
      t.add("zero_grad", t1 - t0);
      t.add("forward", s.t[kLossStart] - s.t[kFwdStart]);
      t.add("loss", s.t[kLossEnd] - s.t[kLossStart]);
      t.add("backward", t2 - s.t[kLossEnd]);
      t.add("optimizer step", t3 - t2);
      t.add("TOTAL step", t3 - t0);
    }
    t.print(("plain model, 1 thread, " + w).c_str());
  }

  {  // DataParallel, 2 devices x 1 thread
    lockstep::set_num_threads(main_threads());
    auto model = make_model();
    lockstep::optim::SGD opt(model->parameters(), lockstep::optim::SGDOptions{.lr = 0.01});
    lockstep::parallel::DataParallelOptions opts;
    opts.threads_per_device = 1;
    opts.reducer.overlap = overlap;
    nn::DataParallel dp(model, cpus(2), std::nullopt, opts);
    for (int k = 0; k < 2; ++k)
      hook_last_grad(dp.replica(static_cast<std::size_t>(k))->parameters());
    PhaseTable t;
    for (int i = 0; i < steps + 10; ++i) {
      double t0 = now_us();
      opt.zero_grad();
      double t1 = now_us();
      dp.forward_backward(x, y, probed_loss);
      double t2 = now_us();
      opt.step();
      double t3 = now_us();
      if (i < 10) continue;
      // Slots of the two workers: every slot but the main thread's that recorded this step.
      std::vector<const Slot*> reps;
      {
        std::lock_guard<std::mutex> lock(g_slots_mu);
        for (auto& [id, idx] : g_slot_of)
          if (id != std::this_thread::get_id() && g_slots[idx].t[kFwdStart] >= t1)
            reps.push_back(&g_slots[idx]);
      }
      if (reps.size() != 2) {
        std::fprintf(stderr, "phases: expected 2 replica slots, got %zu\n", reps.size());
        return 1;
      }
      double last_grad = 0;
      for (const Slot* s : reps) last_grad = std::max(last_grad, s->t[kLastGrad]);
      double dispatch = 0, fwd = 0, loss = 0, bwd = 0;
      for (const Slot* s : reps) {
        dispatch += (s->t[kFwdStart] - t1) / 2;
        fwd += (s->t[kLossStart] - s->t[kFwdStart]) / 2;
        loss += (s->t[kLossEnd] - s->t[kLossStart]) / 2;
        bwd += (s->t[kLastGrad] - s->t[kLossEnd]) / 2;
      }
      t.add("zero_grad (main)", t1 - t0);
      t.add("dispatch+prepare+sync_replica (mean of 2)", dispatch);
      t.add("forward (mean of 2)", fwd);
      t.add("loss (mean of 2)", loss);
      t.add(overlap ? "backward incl. in-hook all-reduce (mean of 2)" : "backward (mean of 2)",
            bwd);
      t.add("backward end skew between replicas",
            std::abs(reps[0]->t[kLastGrad] - reps[1]->t[kLastGrad]));
      t.add("after last grad: finalize/all-reduce/gather", t2 - last_grad);
      t.add("forward_backward total (main)", t2 - t1);
      t.add("optimizer step (main)", t3 - t2);
      t.add("TOTAL step", t3 - t0);
    }
    t.print(("DataParallel 2 devices x 1 thread, overlap " + std::to_string(overlap) + ", " + w)
                .c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  lockstep::reexec_with_openblas_kernels(argv);  // the CLI's kernels (lockstep/core/blas.h)
  std::string phases, run;
  int steps = 200;
  int overlap = 0;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--run=", 6) == 0)
      run = argv[i] + 6;
    else if (std::strncmp(argv[i], "--phases=", 9) == 0)
      phases = argv[i] + 9;
    else if (std::strncmp(argv[i], "--steps=", 8) == 0)
      steps = std::atoi(argv[i] + 8);
    else if (std::strncmp(argv[i], "--overlap=", 10) == 0)
      overlap = std::atoi(argv[i] + 10);
    else if (std::strncmp(argv[i], "--main-threads=", 15) == 0)
      g_main_threads = std::atoi(argv[i] + 15);
    else
      argv[out++] = argv[i];
  }
  argc = out;
  if (!run.empty()) {  // --run=W/CONFIG: 10 warm-up steps, then --steps timed steps
    auto slash = run.find('/');
    Stepper s = make_stepper(run.substr(0, slash), run.substr(slash + 1));
    for (int i = 0; i < 10; ++i) s.step();
    double t0 = now_us();
    for (int i = 0; i < steps; ++i) s.step();
    double t1 = now_us();
    std::printf("%s: %d steps, %.1f us/step, %.0f samples/s\n", run.c_str(), steps,
                (t1 - t0) / steps, static_cast<double>(s.batch) * steps / (t1 - t0) * 1e6);
    return 0;
  }
  if (!phases.empty()) {
    if (phases != "mlp" && phases != "ref") {
      std::fprintf(stderr, "--phases=mlp|ref\n");
      return 2;
    }
    return run_phases(phases, steps, overlap != 0);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  {
    Tensor a = lockstep::ones({64, 64});
    lockstep::matmul(a, a);
  }
  benchmark::AddCustomContext("lockstep_usable_cores", std::to_string(lockstep::usable_cores()));
  const char* ob_env = std::getenv("OPENBLAS_NUM_THREADS");
  benchmark::AddCustomContext("OPENBLAS_NUM_THREADS", ob_env ? ob_env : "unset");
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  benchmark::AddCustomContext("lockstep_version", LOCKSTEP_VERSION);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
