// GPU benchmarks of issue 6 (built with LOCKSTEP_CUDA; run by scripts/gpu-check.sh next to
// bench/pytorch_cuda.py, compared by bench/compare_cuda.py). No Google Benchmark: the GPU machine
// builds from a private prefix without it, and GPU work is timed with a device synchronisation
// around a fixed number of steps instead of per-iteration CPU timing.
//
//   bench_cuda [--seconds S] [--out FILE]
//
// Sections (one JSON object per line on stdout, and in FILE when given):
//   reference  the reference program's step (Linear(10,5)-ReLU-Linear(5,2), batch 32, SGD) on
//              cuda:0: µs per step (zero_grad + forward + loss + backward + step, no host sync
//              inside the loop)
//              Then the same step through DataParallel on cuda:0 as `lockstep train` runs it
//              (impl "lockstep-dp": reducer path, NCCL group of one, flat SGD step) and
//              captured in a CUDA graph and replayed (impl "lockstep-graph",
//              parallel::CUDAGraphStep::step_async; --cuda-graphs), next to PyTorch's eager
//              and CUDA-graph rows
//   mlp        the Fashion-MNIST MLP 784-256-256-10, batch 128: µs per step, samples/s (and its
//              "lockstep-dp" and "lockstep-graph" rows)
//   large_mlp  Linear(8192,8192)-ReLU-Linear(8192,8192)-ReLU-Linear(8192,8192), batch 4096, fp32
//              (no TF32), CrossEntropyLoss over 8192 classes, SGD: TFLOP/s counting the step's 8
//              GEMMs of 2·B·8192² flops each (3 forward, 3 weight gradients, 2 input gradients:
//              the first layer's input needs none); next to "cublas": those 8 GEMMs alone through
//              kernels::cuda::gemm (cuBLAS), the ceiling of that step. Then the same step
//              under autocast ("dtype": "bfloat16", --precision bf16's semantics: forward and
//              loss in an AutocastGuard, bf16 GEMMs with fp32 accumulation, fp32 master weights)
//              next to its 8 GEMMs alone on cublasGemmEx with bf16 operands already cast and
//              fp32 output (kernels::cuda::gemm_bf16_operands): the step's casts and roundings
//              are the difference.
//   allreduce  all_reduce of the nccl backend over every visible GPU (one thread per GPU, one
//              group from new_nccl_group): algbw = bytes / time per call, for 4, 64 and 256 MB of
//              float32. With one GPU the figure is a size-1 group's (no data moves): reported with
//              "gpus": 1 and not a bandwidth.
// Every section that fails prints {"section": ..., "error": "..."} and the program goes on; the
// exit status is 1 when any section failed.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/cuda/allocator.h"
#include "lockstep/cuda/runtime.h"
#include "lockstep/lockstep.h"
#include "ops/cuda/kernels.h"
#include "workloads.h"

namespace {

using namespace lockstep;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

struct Report {
  std::vector<std::string> lines;
  bool failed = false;
  void add(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    lines.push_back(line);
  }
};

// Runs `step` for `warmup` steps, then repeatedly until `seconds` have passed (at least 5 steps),
// synchronising cuda:0 only before and after the timed loop. Returns seconds per step.
double time_steps(const std::function<void()>& step, int warmup, double seconds) {
  for (int i = 0; i < warmup; ++i) step();
  cuda::synchronize(0);
  // Calibrate: steps in ~10 % of the budget, then one timed block of the matching count.
  auto t0 = Clock::now();
  int n = 0;
  while (n < 5 || seconds_since(t0) < 0.1 * seconds) {
    step();
    ++n;
    if (n % 16 == 0) cuda::synchronize(0);
  }
  cuda::synchronize(0);
  const double per = seconds_since(t0) / n;
  const int count = std::max(5, static_cast<int>(0.9 * seconds / std::max(per, 1e-9)));
  t0 = Clock::now();
  for (int i = 0; i < count; ++i) step();
  cuda::synchronize(0);
  return seconds_since(t0) / count;
}

Device gpu0() { return Device(DeviceType::CUDA, 0); }

// A failed CUDA runtime call of the benchmark itself: an exception its section reports.
#define LOCKSTEP_CUDA_BENCH_CHECK(expr)                                                 \
  do {                                                                                  \
    if (const cudaError_t status = (expr); status != cudaSuccess)                       \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(status)); \
  } while (0)

// A workload moved to cuda:0, with its optimizer made after the move.
void move_to_gpu(bench::Workload& w) {
  w.model->to(gpu0());
  w.optimizer = std::make_shared<optim::SGD>(w.model->parameters(), optim::SGDOptions{.lr = 0.01});
  w.x = w.x.to(gpu0());
  w.y = w.y.to(gpu0());
}

void small_workload(Report& r, const char* name, bench::Workload w, double seconds) {
  move_to_gpu(w);
  const double s = time_steps([&] { (void)w.step(); }, 20, seconds);
  std::ostringstream o;
  o << "{\"section\": \"" << name << "\", \"impl\": \"lockstep\", \"batch\": " << w.batch
    << ", \"us_per_step\": " << s * 1e6 << ", \"samples_per_s\": " << w.batch / s << "}";
  r.add(o.str());
}

// The same workload through DataParallel on cuda:0 (the CLI's path: reducer, NCCL group of one,
// the optimizer's flat step after forward_backward), eagerly ("lockstep-dp") and with the step
// captured in a CUDA graph and replayed ("lockstep-graph", parallel::CUDAGraphStep::step_async: no
// host wait inside the loop; the targets are valid, the last replay's check runs at the end).
void graphed_workload(Report& r, const char* name, bench::Workload w, double seconds) {
  nn::DataParallel dp(w.model, std::vector<Device>{gpu0()});
  std::shared_ptr<optim::Optimizer> opt =
      std::make_shared<optim::SGD>(dp.parameters(), optim::SGDOptions{.lr = 0.01});
  const Tensor x = w.x.to(gpu0()), y = w.y.to(gpu0());
  nn::CrossEntropyLoss criterion;
  const double eager = time_steps(
      [&] {
        opt->zero_grad();
        (void)dp.forward_backward(x, y, criterion);
        opt->step();
      },
      20, seconds);
  parallel::CUDAGraphStep step(dp, opt);
  const double graphed = time_steps([&] { (void)step.step_async(x, y); }, 20, seconds);
  step.check();
  if (step.replays() == 0) throw std::runtime_error("the CUDA graph step never replayed");
  for (const auto& [impl, s] :
       {std::pair{"lockstep-dp", eager}, std::pair{"lockstep-graph", graphed}}) {
    std::ostringstream o;
    o << "{\"section\": \"" << name << "\", \"impl\": \"" << impl << "\", \"batch\": " << w.batch
      << ", \"us_per_step\": " << s * 1e6 << ", \"samples_per_s\": " << w.batch / s << "}";
    r.add(o.str());
  }
}

void large_mlp(Report& r, double seconds, bool bf16) {
  constexpr std::int64_t kWidth = 8192, kBatch = 4096;
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kWidth, kWidth), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(kWidth, kWidth), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(kWidth, kWidth)});
  model->to(gpu0());
  optim::SGD opt(model->parameters(), optim::SGDOptions{.lr = 0.01});
  nn::CrossEntropyLoss criterion;
  Tensor x = randn({kBatch, kWidth}).to(gpu0());
  Tensor y = randint(0, kWidth, {kBatch}).to(gpu0());
  const double flops = 8 * 2.0 * kBatch * kWidth * kWidth;
  const double s = time_steps(
      [&] {
        opt.zero_grad();
        Tensor loss;
        {
          AutocastGuard region(bf16);  // backward outside, as PyTorch's recipe
          loss = criterion(model->forward(x), y);
        }
        loss.backward();
        opt.step();
      },
      3, seconds);

  // The same step's GEMMs alone: per layer forward y = x·Wᵀ, backward dW = dyᵀ·x, and dx = dy·W
  // for the two upper layers.
  namespace kc = kernels::cuda;
  cuda::DeviceBuffer a(sizeof(float) * kBatch * kWidth, 0), w(sizeof(float) * kWidth * kWidth, 0),
      c(sizeof(float) * kBatch * kWidth, 0), dw(sizeof(float) * kWidth * kWidth, 0);
  const kc::Exec exec = kc::on_device(0);
  // bf16 operands (zeros: the time does not depend on the values), fp32 results.
  cuda::DeviceBuffer a16(2 * kBatch * kWidth, 0), w16(2 * kWidth * kWidth, 0),
      c16(2 * kBatch * kWidth, 0);
  if (bf16) {
    for (const auto* buf : {&a16, &w16, &c16})
      LOCKSTEP_CUDA_BENCH_CHECK(cudaMemsetAsync(buf->data(), 0, buf->size(), exec.stream));
  }
  auto gemms_bf16 = [&] {
    const auto* A = a16.data_as<std::uint16_t>();
    const auto* W = w16.data_as<std::uint16_t>();
    const auto* C = c16.data_as<std::uint16_t>();
    for (int layer = 0; layer < 3; ++layer)
      kc::gemm_bf16_operands(false, true, kBatch, kWidth, kWidth, A, kWidth, W, kWidth, 0.f,
                             c.data_as<float>(), kWidth, exec);
    for (int layer = 2; layer >= 0; --layer) {
      kc::gemm_bf16_operands(true, false, kWidth, kWidth, kBatch, C, kWidth, A, kWidth, 0.f,
                             dw.data_as<float>(), kWidth, exec);
      if (layer > 0)
        kc::gemm_bf16_operands(false, false, kBatch, kWidth, kWidth, C, kWidth, W, kWidth, 0.f,
                               a.data_as<float>(), kWidth, exec);
    }
  };
  auto gemms = [&] {
    for (int layer = 0; layer < 3; ++layer)
      kc::gemm<float>(false, true, kBatch, kWidth, kWidth, 1.f, a.data_as<float>(), kWidth,
                      w.data_as<float>(), kWidth, 0.f, c.data_as<float>(), kWidth, exec);
    for (int layer = 2; layer >= 0; --layer) {
      kc::gemm<float>(true, false, kWidth, kWidth, kBatch, 1.f, c.data_as<float>(), kWidth,
                      a.data_as<float>(), kWidth, 0.f, dw.data_as<float>(), kWidth, exec);
      if (layer > 0)
        kc::gemm<float>(false, false, kBatch, kWidth, kWidth, 1.f, c.data_as<float>(), kWidth,
                        w.data_as<float>(), kWidth, 0.f, a.data_as<float>(), kWidth, exec);
    }
  };
  const double g = bf16 ? time_steps(gemms_bf16, 2, seconds) : time_steps(gemms, 2, seconds);
  std::ostringstream o;
  o << "{\"section\": \"large_mlp\", \"impl\": \"lockstep\", \"dtype\": \""
    << (bf16 ? "bfloat16" : "float32") << "\", \"batch\": " << kBatch << ", \"width\": " << kWidth
    << ", \"ms_per_step\": " << s * 1e3 << ", \"tflops\": " << flops / s / 1e12
    << ", \"cublas_gemms_ms\": " << g * 1e3 << ", \"cublas_tflops\": " << flops / g / 1e12 << "}";
  r.add(o.str());
}

// Linear's forward as it runs today (bias_rows + gemm with beta 1, + relu_forward: 2 or 3
// launches) next to one cuBLASLt call with the BIAS / RELU_BIAS epilogue
// (kernels::cuda::linear_epilogue), on the layers of the reference workload, the MLP and the
// large MLP: whether the fusion pays off, before linear uses it.
void linear_epilogue(Report& r, double seconds) {
  namespace kc = kernels::cuda;
  const kc::Exec exec = kc::on_device(0);
  struct Layer {
    std::int64_t rows, out, in;
    bool relu;
  };
  for (const Layer l :
       {Layer{32, 5, 10, true}, Layer{32, 2, 5, false}, Layer{128, 256, 784, true},
        Layer{128, 256, 256, true}, Layer{128, 10, 256, false}, Layer{4096, 8192, 8192, true}}) {
    cuda::DeviceBuffer x(sizeof(float) * l.rows * l.in, 0), w(sizeof(float) * l.out * l.in, 0),
        b(sizeof(float) * l.out, 0), y(sizeof(float) * l.rows * l.out, 0);
    for (const auto* buf : {&x, &w, &b})
      LOCKSTEP_CUDA_BENCH_CHECK(cudaMemsetAsync(buf->data(), 0, buf->size(), exec.stream));
    const auto* X = x.data_as<float>();
    const auto* W = w.data_as<float>();
    const auto* B = b.data_as<float>();
    auto* Y = y.data_as<float>();
    const double unfused = time_steps(
        [&] {
          kc::bias_rows<float>(B, Y, l.rows, l.out, exec);
          kc::gemm<float>(false, true, l.rows, l.out, l.in, 1.f, X, l.in, W, l.in, 1.f, Y, l.out,
                          exec);
          if (l.relu) kc::relu_forward<float>(Y, Y, l.rows * l.out, exec);
        },
        10, seconds / 4);
    bool ok = true;
    const double fused = time_steps(
        [&] { ok = kc::linear_epilogue<float>(l.rows, l.out, l.in, X, W, B, Y, l.relu, exec); }, 10,
        seconds / 4);
    std::ostringstream o;
    o << "{\"section\": \"linear_epilogue\", \"impl\": \"lockstep\", \"rows\": " << l.rows
      << ", \"out\": " << l.out << ", \"in\": " << l.in
      << ", \"relu\": " << (l.relu ? "true" : "false") << ", \"unfused_us\": " << unfused * 1e6;
    if (ok)
      o << ", \"epilogue_us\": " << fused * 1e6 << ", \"speedup\": " << unfused / fused << "}";
    else
      o << ", \"epilogue_us\": null, \"note\": \"cuBLASLt offered no algorithm\"}";
    r.add(o.str());
  }
}

void allreduce(Report& r, double seconds) {
  const int n = cuda::device_count();
  std::vector<Device> devices;
  for (int k = 0; k < n; ++k) devices.push_back(Device(DeviceType::CUDA, k));
  dist::NcclOptions options;
  options.check_arguments = false;  // measure NCCL, as DataParallel uses it
  auto groups = dist::new_nccl_group(devices, options);
  for (std::int64_t mb : {4, 64, 256}) {
    const std::int64_t numel = mb * (1 << 20) / 4;
    std::vector<double> per(static_cast<std::size_t>(n));
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int k = 0; k < n; ++k)
      threads.emplace_back([&, k] {
        try {
          const std::size_t i = static_cast<std::size_t>(k);
          Tensor t = zeros({numel}).to(devices[i]);
          auto call = [&] { groups[i]->all_reduce(t); };
          for (int j = 0; j < 3; ++j) call();
          cuda::synchronize(k);
          groups[i]->barrier();
          // A fixed count per size, the same on every rank (collectives must match).
          const int count = mb <= 4 ? 200 : mb <= 64 ? 40 : 12;
          const auto t0 = Clock::now();
          for (int j = 0; j < count; ++j) call();
          cuda::synchronize(k);
          per[i] = seconds_since(t0) / count;
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(k)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
      if (!e.empty()) throw std::runtime_error(e);
    const double worst = *std::max_element(per.begin(), per.end());
    std::ostringstream o;
    o << "{\"section\": \"allreduce\", \"impl\": \"lockstep-nccl\", \"gpus\": " << n
      << ", \"mbytes\": " << mb << ", \"us_per_call\": " << worst * 1e6
      << ", \"algbw_gbps\": " << (n > 1 ? mb * (1 << 20) / worst / 1e9 : 0.0) << ", \"nccl\": \""
      << dist::nccl_version() << "\"}";
    r.add(o.str());
  }
  (void)seconds;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3.0;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc)
      seconds = std::stod(argv[++i]);
    else if (a == "--out" && i + 1 < argc)
      out_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--seconds S] [--out FILE]\n", argv[0]);
      return 2;
    }
  }
  Report r;
  if (cuda::device_count() == 0) {
    r.add("{\"section\": \"device\", \"error\": \"no CUDA device: " +
          json_escape(cuda::unavailable_reason()) + "\"}");
    r.failed = true;
  } else {
    const auto p = cuda::get_device_properties(0);
    std::ostringstream o;
    o << "{\"section\": \"device\", \"name\": \"" << json_escape(p.name)
      << "\", \"count\": " << cuda::device_count() << ", \"sm\": " << p.major << p.minor << "}";
    r.add(o.str());
    const std::vector<std::pair<const char*, std::function<void()>>> sections{
        {"reference",
         [&] { small_workload(r, "reference", bench::make_reference_workload(), seconds); }},
        {"reference",
         [&] { graphed_workload(r, "reference", bench::make_reference_workload(), seconds); }},
        {"mlp", [&] { small_workload(r, "mlp", bench::make_mlp_workload(), seconds); }},
        {"mlp", [&] { graphed_workload(r, "mlp", bench::make_mlp_workload(), seconds); }},
        {"large_mlp", [&] { large_mlp(r, seconds, false); }},
        {"large_mlp", [&] { large_mlp(r, seconds, true); }},
        {"allreduce", [&] { allreduce(r, seconds); }},
        {"linear_epilogue", [&] { linear_epilogue(r, seconds); }},
    };
    for (const auto& [name, run] : sections) {
      try {
        run();
      } catch (const std::exception& e) {
        r.add(std::string("{\"section\": \"") + name + "\", \"error\": \"" + json_escape(e.what()) +
              "\"}");
        r.failed = true;
      }
    }
  }
  if (!out_path.empty()) {
    std::ofstream f(out_path);
    for (const auto& l : r.lines) f << l << "\n";
  }
  return r.failed ? 1 : 0;
}
