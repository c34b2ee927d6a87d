// Issues 17 and 18, "Speed it must measure": one training step at batch --batch (128) on
// [1, 28, 28] float32 images: zero_grad, forward, cross-entropy, backward, Adam(lr 1e-3) step, on
// a fixed random batch made before timing. --model:
//   cnn       the main job's CNN: Conv2d(1,16,3,padding=1) BatchNorm2d(16) ReLU MaxPool2d(2)
//             Conv2d(16,32,3,padding=1) BatchNorm2d(32) ReLU MaxPool2d(2) Flatten
//             Linear(1568,128) ReLU Linear(128,10)
//   resnet20  nn::resnet20(1, 10) (He et al.'s CIFAR ResNet-20, 21 BatchNorm2d)
// --sync-bn=1 applies nn::convert_sync_batchnorm before wrapping (issue 18: what SyncBatchNorm
// costs; the plain 1-device module has no group, so there it is plain BatchNorm).
// --devices 1 trains the plain module; N > 1 DataParallel over cpu:0 ... cpu:N-1
// (forward_backward, then the Adam step on the calling thread, threads_per_device 1).
// --ddp=1 (under `mpirun -np R --bind-to core`, an MPI build): DistributedDataParallel over the
// mpi backend, each rank on cpu:0 ... cpu:N-1 with 1 intra-op thread (set_num_threads(1),
// threads_per_device 1; --threads is ignored), its part of the global batch
// (parallel::split_batch), the same Adam step; each round starts after a barrier and its time
// is the slower rank's (all_reduce Max); rank 0 prints. bench/compare_cnn.sh and
// bench/compare_sync_bn.sh run it next to bench/pytorch_cnn.py.
//
//   bench_cnn [--model=cnn] [--sync-bn=0] [--batch=128] [--devices=1] [--threads=2] [--ddp=0]
//             [--steps=20] [--warmup=3] [--reps=5]
//
// Output: one line, "RESULT framework=lockstep model=M devices=D ranks=R threads=T sync_bn=S
// batch=B ms_per_step=M samples_per_s=S min_ms=m max_ms=x" with the median (and range) over
// --reps rounds of --steps steps each (batch: the global batch; threads: per rank).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.h"
#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

using bench::arg;
using bench::option;

std::shared_ptr<nn::Module> cnn() {
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
  lockstep::reexec_with_openblas_kernels(argv);  // the CLI's kernels (lockstep/core/blas.h)
  const std::string model_name = option(argc, argv, "model", "cnn");
  const long batch = arg(argc, argv, "batch", 128), devices = arg(argc, argv, "devices", 1);
  const bool sync_bn = arg(argc, argv, "sync-bn", 0) != 0, ddp = arg(argc, argv, "ddp", 0) != 0;
  const long threads = ddp ? 1 : arg(argc, argv, "threads", 2);
  const long steps = arg(argc, argv, "steps", 20), warmup = arg(argc, argv, "warmup", 3);
  const long reps = arg(argc, argv, "reps", 5);
  if ((model_name != "cnn" && model_name != "resnet20") || devices < 1 || steps < 1 || reps < 1) {
    std::fprintf(stderr, "bench_cnn: bad arguments (--model=cnn|resnet20, counts >= 1)\n");
    return 2;
  }
  if (ddp && !dist::mpi_available()) {
    std::fprintf(stderr, "bench_cnn: --ddp=1 needs a build with LOCKSTEP_MPI=ON\n");
    return 2;
  }
  set_num_threads(static_cast<int>(threads));
  std::shared_ptr<dist::ProcessGroup> group;
  if (ddp) group = dist::init_mpi({.timeout_seconds = 600});
  const int rank = group ? group->rank() : 0, ranks = group ? group->size() : 1;
  manual_seed(0);  // the same model and global batch on every rank (DDP broadcasts rank 0's)
  std::shared_ptr<nn::Module> model = model_name == "cnn" ? cnn() : nn::resnet20(1, 10);
  if (sync_bn) nn::convert_sync_batchnorm(model);
  Tensor x = randn({batch, 1, 28, 28});
  Tensor y = randint(0, 10, {batch});
  if (group) {  // this rank's part of the global batch
    const auto [start, count] = parallel::split_batch(batch, ranks)[static_cast<std::size_t>(rank)];
    x = x.narrow(0, start, count);
    y = y.narrow(0, start, count);
  }
  const nn::CrossEntropyLoss criterion;
  std::unique_ptr<parallel::DataParallel> dp;
  std::shared_ptr<optim::Adam> adam;
  std::vector<Device> ds;
  for (long k = 0; k < devices; ++k) ds.push_back(cpu(static_cast<int>(k)));
  if (group) {
    parallel::DistributedDataParallelOptions o;
    o.device_ids = ds;
    o.threads_per_device = 1;
    dp = std::make_unique<parallel::DistributedDataParallel>(model, group, o);
  } else if (devices > 1) {
    parallel::DataParallelOptions o;
    o.threads_per_device = 1;
    dp = std::make_unique<parallel::DataParallel>(model, ds, std::nullopt, o);
  }
  const optim::AdamOptions adam_options{.lr = 1e-3};
  adam = std::make_shared<optim::Adam>(dp ? dp->parameters() : model->parameters(), adam_options);
  auto step = [&] {
    adam->zero_grad();
    if (dp)
      dp->forward_backward(x, y, criterion);
    else
      cross_entropy(model->forward(x), y).backward();
    adam->step();
  };
  for (long i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  for (long r = 0; r < reps; ++r) {
    if (group) group->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < steps; ++i) step();
    const auto t1 = std::chrono::steady_clock::now();
    double t = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (group) {  // the slower rank's time
      Tensor slowest = full({1}, t, kFloat64);
      group->all_reduce(slowest, dist::ReduceOp::Max);
      t = slowest.item();
    }
    ms.push_back(t / static_cast<double>(steps));
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  if (rank == 0)
    std::printf(
        "RESULT framework=lockstep model=%s devices=%ld ranks=%d threads=%ld sync_bn=%d "
        "batch=%ld ms_per_step=%.3f samples_per_s=%.1f min_ms=%.3f max_ms=%.3f\n",
        model_name.c_str(), devices, ranks, threads, sync_bn ? 1 : 0, batch, median,
        1000.0 * static_cast<double>(batch) / median, ms.front(), ms.back());
  if (group) dist::finalize_mpi();
  return 0;
}
