// Issue 17, "Speed it must measure": one training step of the main job's CNN
//   Conv2d(1,16,3,padding=1) BatchNorm2d(16) ReLU MaxPool2d(2) Conv2d(16,32,3,padding=1)
//   BatchNorm2d(32) ReLU MaxPool2d(2) Flatten Linear(1568,128) ReLU Linear(128,10)
// at batch --batch (128) on [1, 28, 28] float32 images: zero_grad, forward, cross-entropy,
// backward, Adam(lr 1e-3) step, on a fixed random batch made before timing. --devices 1 trains
// the plain module; N > 1 DataParallel over cpu:0 ... cpu:N-1 (forward_backward, Adam as the
// fused optimizer, threads_per_device 1). bench/compare_cnn.sh runs it next to
// bench/pytorch_cnn.py.
//
//   bench_cnn [--batch=128] [--devices=1] [--threads=2] [--steps=20] [--warmup=3] [--reps=5]
//
// Output: one line, "RESULT framework=lockstep devices=D threads=T batch=B ms_per_step=M
// samples_per_s=S min_ms=m max_ms=x" with the median (and range) over --reps rounds of --steps
// steps each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

long arg(int argc, char** argv, const char* name, long fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return std::strtol(argv[i] + prefix.size(), nullptr, 10);
  return fallback;
}

std::shared_ptr<nn::Sequential> cnn() {
  using std::make_shared;
  return make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      make_shared<nn::Conv2d>(1, 16, 3, 1, 1), make_shared<nn::BatchNorm2d>(16),
      make_shared<nn::ReLU>(), make_shared<nn::MaxPool2d>(2),
      make_shared<nn::Conv2d>(16, 32, 3, 1, 1), make_shared<nn::BatchNorm2d>(32),
      make_shared<nn::ReLU>(), make_shared<nn::MaxPool2d>(2), make_shared<nn::Flatten>(),
      make_shared<nn::Linear>(1568, 128), make_shared<nn::ReLU>(),
      make_shared<nn::Linear>(128, 10)});
}

}  // namespace

int main(int argc, char** argv) {
  const long batch = arg(argc, argv, "batch", 128), devices = arg(argc, argv, "devices", 1);
  const long threads = arg(argc, argv, "threads", 2), steps = arg(argc, argv, "steps", 20);
  const long warmup = arg(argc, argv, "warmup", 3), reps = arg(argc, argv, "reps", 5);
  set_num_threads(static_cast<int>(threads));
  manual_seed(0);
  auto model = cnn();
  const Tensor x = randn({batch, 1, 28, 28});
  const Tensor y = randint(0, 10, {batch});
  const nn::CrossEntropyLoss criterion;
  std::unique_ptr<parallel::DataParallel> dp;
  std::shared_ptr<optim::Adam> adam;
  if (devices > 1) {
    parallel::DataParallelOptions o;
    o.threads_per_device = 1;
    std::vector<Device> ds;
    for (long k = 0; k < devices; ++k) ds.push_back(cpu(static_cast<int>(k)));
    dp = std::make_unique<parallel::DataParallel>(model, ds, std::nullopt, o);
    adam = std::make_shared<optim::Adam>(dp->parameters(), optim::AdamOptions{.lr = 1e-3});
    dp->register_fused_optim(adam);
  } else {
    adam = std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  }
  auto step = [&] {
    adam->zero_grad();
    if (dp) {
      dp->forward_backward(x, y, criterion);  // the fused Adam steps inside
    } else {
      cross_entropy(model->forward(x), y).backward();
      adam->step();
    }
  };
  for (long i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  for (long r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < steps; ++i) step();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() /
                 static_cast<double>(steps));
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  std::printf(
      "RESULT framework=lockstep devices=%ld threads=%ld batch=%ld ms_per_step=%.3f "
      "samples_per_s=%.1f min_ms=%.3f max_ms=%.3f\n",
      devices, threads, batch, median, 1000.0 * static_cast<double>(batch) / median, ms.front(),
      ms.back());
  return 0;
}
