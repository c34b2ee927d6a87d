// Issue 19, "Speed it must measure": nanoGPT's training step (karpathy/nanoGPT, model.py's GPT
// and configure_optimizers, train.py's step) on nn::GPT. The defaults are nanoGPT's CPU
// configuration for shakespeare_char (config/train_shakespeare_char.py with its README's CPU
// overrides: n_layer 4, n_head 4, n_embd 128, block_size 64, batch_size 12, bias False,
// dropout 0.0; vocab_size 65). One step, on a fixed random batch made before timing (tokens and
// targets uniform in [0, vocab) from manual_seed(0), so data loading is not part of it):
//   zero_grad (set to none), logits = model(idx), nn::gpt_loss(logits, targets), backward,
//   nn::utils::clip_grad_norm_(parameters, 1.0), AdamW step
// with optim::configure_optimizers(model, 0.1, 1e-3, {0.9, 0.99}) (train_shakespeare_char's
// learning_rate 1e-3 and beta2 0.99; weight decay 0.1 on the >= 2-dim tensors).
//   --devices 0 or 1  the plain module on the calling thread, --threads intra-op threads
//   --devices N >= 2  parallel::DataParallel over cpu:0 ... cpu:N-1 (threads_per_device 1),
//                     forward_backward(idx, targets, gpt_loss, count_targets), then the same
//                     clip and AdamW step on the calling thread
//   --device=cuda:K   the plain module moved to that GPU (Module::to); --devices N >= 2 with a
//                     CUDA --device: DataParallel over cuda:0 ... cuda:N-1. Each round ends with
//                     a device synchronisation (cuda::synchronize), so it times the GPU's work.
// bench/compare_gpt.sh runs it next to bench/pytorch_gpt.py; scripts/gpu-check.sh runs GPT-2
// 124M (--layers=12 --heads=12 --embd=768 --block=1024 --vocab=50304) on cuda:0.
//
//   bench_gpt [--devices=1] [--threads=2] [--device=cpu] [--batch=12] [--block=64] [--layers=4]
//             [--heads=4] [--embd=128] [--vocab=65] [--steps=20] [--warmup=3] [--reps=5]
//             [--peak-gflops=P]
//
// FLOPs: nanoGPT's estimate_mfu (model.py, GPT.estimate_mfu, after PaLM's appendix B,
// https://arxiv.org/abs/2204.02311): flops_per_token = 6·N + 12·L·H·Q·T with N =
// get_num_params() (non-embedding: the tied wte/lm_head counted, wpe not), L layers, H heads,
// Q = n_embd / n_head, T = block_size; a step is flops_per_token · B · T. For the default
// configuration N = 795,904 and flops_per_token = 5.169 MFLOP (3.97 GFLOP a step).
// Peak (--peak-gflops, default from the machine): on the CPU, usable cores × the clock of
// /proc/cpuinfo's first "cpu MHz" × 32 float32 FLOP/cycle/core (two 8-wide FMA units: AVX2, and
// AMD's AVX-512 up to Zen 4, which runs a 512-bit FMA as two 256-bit halves; 64 for an Intel CPU
// with avx512f, two 16-wide FMA units): 2 × 2.596 GHz × 32 = 166 GFLOP/s on the project's AMD
// EPYC (Zen 3 or Zen 4 with AVX-512, both 32). On a
// GPU of compute capability 9.x (H100/H200 SXM): SMs × 128 FP32 lanes × 2 × 1.98 GHz (boost),
// 66.9 TFLOP/s for 132 SMs, float32 without tensor cores (Lockstep's float32 GEMMs use none);
// other GPUs: 0 (pct_peak=nan) unless --peak-gflops is given.
//
// Output: one line, "RESULT framework=lockstep model=gpt device=cpu devices=D threads=T batch=B
// block=T layers=L heads=H embd=C vocab=V params=N ms_per_step=M tokens_per_s=S gflops=G
// peak_gflops=P pct_peak=X min_ms=m max_ms=x loss=l" with the median (and range) over --reps
// rounds of --steps steps each; gflops and pct_peak are at the median; loss is the last step's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/cuda/runtime.h"
#include "bench_args.h"
#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

using bench::arg;
using bench::option;

// usable cores × GHz × FLOP/cycle/core from /proc/cpuinfo; 0 when it cannot be read.
double cpu_peak_gflops() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  bool avx512 = false, intel = false;
  while (std::getline(in, line)) {
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) mhz = std::strtod(line.c_str() + colon + 1, nullptr);
    }
    if (line.rfind("vendor_id", 0) == 0 && line.find("GenuineIntel") != std::string::npos)
      intel = true;
    if (line.rfind("flags", 0) == 0 && line.find(" avx512f") != std::string::npos) avx512 = true;
  }
  return usable_cores() * mhz / 1000.0 * (avx512 && intel ? 64 : 32);
}

// Hopper (H100/H200 SXM): SMs × 128 FP32 lanes × 2 FLOP (FMA) × 1.98 GHz boost clock.
double gpu_peak_gflops(int device) {
  const cuda::DeviceProperties p = cuda::get_device_properties(device);
  return p.major == 9 ? p.multi_processor_count * 128 * 2 * 1.98 : 0.0;
}

int run(int argc, char** argv) {
  nn::GPTConfig config;
  config.n_layer = arg(argc, argv, "layers", 4);
  config.n_head = arg(argc, argv, "heads", 4);
  config.n_embd = arg(argc, argv, "embd", 128);
  config.block_size = arg(argc, argv, "block", 64);
  config.vocab_size = arg(argc, argv, "vocab", 65);
  config.bias = false;
  config.dropout = 0.0;
  const long batch = arg(argc, argv, "batch", 12), devices = arg(argc, argv, "devices", 1);
  const long threads = arg(argc, argv, "threads", 2);
  const long steps = arg(argc, argv, "steps", 20), warmup = arg(argc, argv, "warmup", 3);
  const long reps = arg(argc, argv, "reps", 5);
  const std::string device_name = option(argc, argv, "device", "cpu");
  const std::string peak_option = option(argc, argv, "peak-gflops", "");
  if (batch < 1 || devices < 0 || threads < 1 || steps < 1 || warmup < 0 || reps < 1) {
    std::fprintf(stderr, "bench_gpt: bad arguments (batch, threads, steps, reps >= 1)\n");
    return 2;
  }
  const Device device = Device::parse(device_name);
  if (device.is_cuda()) cuda::check_device(device.index);
  set_num_threads(static_cast<int>(threads));

  manual_seed(0);
  auto model = std::make_shared<nn::GPT>(config);  // ValueError for a bad configuration
  const Tensor idx_cpu = randint(0, config.vocab_size, {batch, config.block_size});
  const Tensor targets_cpu = randint(0, config.vocab_size, {batch, config.block_size});
  std::unique_ptr<parallel::DataParallel> dp;
  if (devices >= 2) {
    std::vector<Device> ds;
    for (long k = 0; k < devices; ++k)
      ds.emplace_back(device.type, static_cast<int>(k));  // cpu:k or cuda:k
    parallel::DataParallelOptions o;
    o.threads_per_device = 1;
    dp = std::make_unique<parallel::DataParallel>(model, ds, std::nullopt, o);
  } else if (device.is_cuda()) {
    model->to(device);
  }
  // DataParallel keeps the master parameters on device_ids[0], where the batch goes too.
  const Device home = dp ? dp->device_ids().front() : device;
  const Tensor idx = idx_cpu.to(home), targets = targets_cpu.to(home);
  const std::shared_ptr<optim::AdamW> optimizer =
      optim::configure_optimizers(*model, 0.1, 1e-3, {0.9, 0.99});
  const std::vector<Tensor> params = model->parameters();
  const parallel::LossFn loss_fn = [](const Tensor& logits, const Tensor& y) {
    return nn::gpt_loss(logits, y);
  };
  const parallel::LossCount loss_count = [](const Tensor& y) { return nn::count_targets(y); };

  Tensor loss;
  auto step = [&] {
    optimizer->zero_grad();
    if (dp) {
      loss = dp->forward_backward(idx, targets, loss_fn, loss_count);
    } else {
      loss = nn::gpt_loss(model->forward(idx), targets);
      loss.backward();
    }
    nn::utils::clip_grad_norm_(params, 1.0);
    optimizer->step();
  };
  auto sync = [&] {
    if (home.is_cuda()) cuda::synchronize(home.index);
  };
  for (long i = 0; i < warmup; ++i) step();
  sync();
  std::vector<double> ms;
  for (long r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < steps; ++i) step();
    sync();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() /
                 static_cast<double>(steps));
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];

  const std::int64_t n_params = model->get_num_params();
  const double L = static_cast<double>(config.n_layer), H = static_cast<double>(config.n_head);
  const double Q = static_cast<double>(config.n_embd / config.n_head);
  const double T = static_cast<double>(config.block_size);
  const double flops_per_token = 6.0 * static_cast<double>(n_params) + 12.0 * L * H * Q * T;
  const double tokens_per_step = static_cast<double>(batch) * T;
  const double tokens_per_s = 1000.0 * tokens_per_step / median;
  const double gflops = tokens_per_s * flops_per_token * 1e-9;
  const double peak = !peak_option.empty() ? std::strtod(peak_option.c_str(), nullptr)
                      : home.is_cuda()     ? gpu_peak_gflops(home.index)
                                           : cpu_peak_gflops();
  const double pct = peak > 0 ? 100.0 * gflops / peak : std::nan("");
  std::printf(
      "RESULT framework=lockstep model=gpt device=%s devices=%ld threads=%ld batch=%ld block=%lld "
      "layers=%lld heads=%lld embd=%lld vocab=%lld params=%lld ms_per_step=%.3f "
      "tokens_per_s=%.1f gflops=%.2f peak_gflops=%.1f pct_peak=%.2f min_ms=%.3f max_ms=%.3f "
      "loss=%.4f\n",
      home.str().c_str(), devices, threads, batch, static_cast<long long>(config.block_size),
      static_cast<long long>(config.n_layer), static_cast<long long>(config.n_head),
      static_cast<long long>(config.n_embd), static_cast<long long>(config.vocab_size),
      static_cast<long long>(n_params), median, tokens_per_s, gflops, peak, pct, ms.front(),
      ms.back(), loss.item());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  lockstep::reexec_with_openblas_kernels(argv);  // the CLI's kernels (lockstep/core/blas.h)
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a bad configuration or device, CUDA out of memory
    std::fprintf(stderr, "bench_gpt: %s\n", e.what());
    return 1;
  }
}
