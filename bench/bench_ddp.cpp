// Issue 5, "Benchmarks": DistributedDataParallel over the mpi backend training the MLP
// 784-256-256-10 on Fashion-MNIST, global batch 128, one process per rank under mpirun
// (bench/compare_ddp.sh runs it on 2 ranks next to bench/pytorch_ddp_fashion.py).
//
// Every rank loads the Fashion-MNIST training set (data::load_mnist_dir, as the CLI's
// --data fashion-mnist: pixels / 255, images flattened to 784 features), builds
// Sequential(Linear(784,256), ReLU, Linear(256,256), ReLU, Linear(256,10)) after
// manual_seed(0) (DDP broadcasts rank 0's parameters anyway), SGD lr 0.01 and CrossEntropyLoss.
// Step i takes global batch i of 128 samples in file order (samples [128 i, 128 i + 128) modulo
// the 468 whole batches of the 60000 images) and trains on this rank's part of it as the CLI
// cuts it (parallel::split_batch: 64/64 on 2 ranks):
//   optimizer.zero_grad(); ddp.forward_backward(x_local, y_local, criterion); optimizer.step();
// Every configuration has its own model, starting at batch 0. Intra-op threads: 1 per rank
// (set_num_threads(1) on the main thread, threads_per_device = 1); mpirun binds each rank to a
// core.
//
// Configurations (DistributedDataParallelOptions, all on one local device cpu:0):
//   overlap:on                 the defaults: bucket_cap_bytes 25 MB, reducer.overlap = true
//   overlap:off                reducer.overlap = false (buckets all-reduced after backward)
//   overlap:on/bucket:64KB     bucket_cap_bytes = 64 KiB (the MLP's 1.08 MB of gradients fall
//   overlap:off/bucket:64KB    into 4 buckets instead of 1, so overlap can change something)
//   overlap:on/no-arg-check    defaults with MpiOptions::check_arguments = false (one
//                              MPI_Iallgather fewer per collective)
//   deterministic              deterministic = true, shard_size 8 (all_gather of the shard
//                              gradients, fixed-tree sum; bit-identical to one process)
//
// Timing: per configuration, warm-up steps, then a probe that sets the steps per round so that a
// round lasts about --min-time seconds (the same count on every rank); then --reps rounds of
// every configuration, taken round-robin (config 1, 2, ..., 6, 1, 2, ...) so that a change of
// load on a shared machine hits all of them alike; the best round counts. Each round starts
// after a barrier and its time is the slower rank's (all_reduce Max of the ranks' times).
//
//   mpirun -np 2 --bind-to core bench_ddp [--data=DIR] [--min-time=2] [--reps=3] [--warmup=30]
//                                         [--configs=overlap:on,deterministic,...]
//
// Output (rank 0, stdout), one record per line:
//   INFO key=value ...
//   RESULT framework=lockstep config=C us_per_step=T samples_per_s=S comm=all_reduce|all_gather
//          comm_bytes_per_step=B buckets=K ...
// comm_bytes_per_step: the gradient bytes this rank all-reduced in the last step
// (bytes_moved_last_step(); one local device, so no replica copies), or in deterministic mode
// the bytes of its [shards, parameters] float32 block in the all_gather. The small collectives
// of every step (the all_gather of the ranks' sample counts, the all_reduce of the has-grad
// flags) are not counted.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lockstep/lockstep.h"

using namespace lockstep;

namespace {

constexpr std::int64_t kGlobalBatch = 128;

std::string option(int argc, char** argv, const char* name, const std::string& fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  return fallback;
}

// Whether `name` is one of the comma-separated names in `list`.
bool listed(const std::string& list, const std::string& name) {
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (list.compare(pos, comma - pos, name) == 0) return true;
    pos = comma + 1;
  }
  return false;
}

// Exposes the reducer's bucket count (protected in DataParallel) for the report.
class BenchDdp : public parallel::DistributedDataParallel {
 public:
  using parallel::DistributedDataParallel::DistributedDataParallel;
  std::size_t buckets() const { return reducers_.empty() ? 0 : reducers_[0]->num_buckets(); }
};

struct Config {
  std::string name;
  bool overlap = true;
  std::int64_t bucket_cap = 25 * 1024 * 1024;
  bool check_arguments = true;
  bool deterministic = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The slowest rank's value (all_reduce Max), identical on every rank.
double slowest(dist::ProcessGroup& g, double mine) {
  Tensor t = full({1}, mine, kFloat64);
  g.all_reduce(t, dist::ReduceOp::Max);
  return t.item();
}

// One configuration: its own model, DDP wrapper, optimizer and position in the data.
class Runner {
 public:
  Runner(Config c, std::shared_ptr<dist::ProcessGroup> group, const data::LabeledData& train)
      : c_(std::move(c)), g_(std::move(group)), train_(train) {
    use();
    manual_seed(0);
    auto model =
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(),
            std::make_shared<nn::Linear>(256, 10)});
    parallel::DistributedDataParallelOptions o;
    o.threads_per_device = 1;
    o.reducer.overlap = c_.overlap;
    o.reducer.bucket_cap_bytes = c_.bucket_cap;
    o.deterministic = c_.deterministic;
    shard_size_ = o.shard_size;
    ddp_ = std::make_unique<BenchDdp>(model, g_, o);
    optimizer_ = std::make_unique<optim::SGD>(ddp_->parameters(), optim::SGDOptions{.lr = 0.01});
    batches_ = train_.features.size(0) / kGlobalBatch;
    std::tie(start_, count_) = parallel::split_batch(
        kGlobalBatch, g_->size(),
        c_.deterministic ? shard_size_ : 0)[static_cast<std::size_t>(g_->rank())];
  }

  const Config& config() const { return c_; }

  // The process group's argument check as this configuration wants it (a process-wide setting).
  void use() const {
    dist::init_mpi({.timeout_seconds = 600, .check_arguments = c_.check_arguments});
  }

  // One training step on the next global batch; returns the global mean loss.
  double step() {
    const std::int64_t first = (next_++ % batches_) * kGlobalBatch + start_;
    Tensor x = train_.features.narrow(0, first, count_);
    Tensor y = train_.labels.narrow(0, first, count_);
    optimizer_->zero_grad();
    Tensor loss = ddp_->forward_backward(x, y, criterion_);
    optimizer_->step();
    return loss.item();
  }

  // Warm-up, then the steps per round for ~min_time seconds from the slower rank's time of a
  // probe (the same count on every rank).
  void warm_up(int warmup, double min_time) {
    use();
    first_loss_ = step();
    for (int i = 1; i < warmup; ++i) step();
    g_->barrier();
    const int probe = std::max(warmup, 10);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < probe; ++i) step();
    const double per = slowest(*g_, seconds_since(t0)) / probe;
    steps_per_round_ = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(min_time / std::max(per, 1e-7)), 10, 1'000'000);
  }

  // One timed round (after a barrier); keeps the best seconds per step, the slower rank's.
  void round() {
    use();
    g_->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < steps_per_round_; ++i) last_loss_ = step();
    best_ =
        std::min(best_, slowest(*g_, seconds_since(t0)) / static_cast<double>(steps_per_round_));
  }

  void report() const {
    std::int64_t bytes = ddp_->bytes_moved_last_step();
    const std::string buckets =
        c_.deterministic ? std::string("-") : std::to_string(ddp_->buckets());
    if (c_.deterministic) {
      // bytes_moved_last_step() is not set on the deterministic path; report what it sends: an
      // all_gather of [shards, parameters] float32 (plus a small float64 table of flags/losses).
      std::int64_t numel = 0;
      for (const auto& p : ddp_->parameters()) numel += p.numel();
      bytes = (count_ / shard_size_) * numel * 4;
    }
    std::printf(
        "RESULT framework=lockstep config=%s us_per_step=%.1f samples_per_s=%.0f "
        "comm=%s comm_bytes_per_step=%lld buckets=%s steps_per_round=%lld steps=%lld "
        "first_loss=%.4f last_loss=%.4f\n",
        c_.name.c_str(), best_ * 1e6, static_cast<double>(kGlobalBatch) / best_,
        c_.deterministic ? "all_gather" : "all_reduce", static_cast<long long>(bytes),
        buckets.c_str(), static_cast<long long>(steps_per_round_), static_cast<long long>(next_),
        first_loss_, last_loss_);
    std::fflush(stdout);
  }

 private:
  Config c_;
  std::shared_ptr<dist::ProcessGroup> g_;
  const data::LabeledData& train_;
  std::unique_ptr<BenchDdp> ddp_;
  std::unique_ptr<optim::SGD> optimizer_;
  nn::CrossEntropyLoss criterion_;
  std::int64_t shard_size_ = 0, batches_ = 0, start_ = 0, count_ = 0;
  std::int64_t next_ = 0;  // global batch index of the next step
  std::int64_t steps_per_round_ = 0;
  double best_ = 1e300, first_loss_ = 0, last_loss_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  lockstep::reexec_with_openblas_kernels(argv);  // the CLI's kernels (lockstep/core/blas.h)
  const std::string dir = option(argc, argv, "data", data::kFashionMnistDir);
  const double min_time = std::atof(option(argc, argv, "min-time", "2").c_str());
  const int reps = std::atoi(option(argc, argv, "reps", "3").c_str());
  const int warmup = std::atoi(option(argc, argv, "warmup", "30").c_str());
  const std::string only = option(argc, argv, "configs", "");

  set_num_threads(1);
  auto g = dist::init_mpi({.timeout_seconds = 600});
  const int rank = g->rank(), n = g->size();
  const auto t_load = std::chrono::steady_clock::now();
  data::LabeledData train = data::load_mnist_dir(dir).train;
  const double load_s = seconds_since(t_load);

  const std::vector<Config> configs = {
      {.name = "overlap:on"},
      {.name = "overlap:off", .overlap = false},
      {.name = "overlap:on/bucket:64KB", .bucket_cap = 64 * 1024},
      {.name = "overlap:off/bucket:64KB", .overlap = false, .bucket_cap = 64 * 1024},
      {.name = "overlap:on/no-arg-check", .check_arguments = false},
      {.name = "deterministic", .deterministic = true},
  };
  if (rank == 0) {
    std::string parts;  // local batch sizes, e.g. "64/64"
    for (const auto& part : parallel::split_batch(kGlobalBatch, n)) {
      if (!parts.empty()) parts += '/';
      parts += std::to_string(part.second);
    }
    std::printf(
        "INFO framework=lockstep ranks=%d global_batch=%lld local_batches=%s train=%s "
        "images=%lld load_s=%.2f intra_op_threads=%d threads_per_device=1 usable_cores=%d "
        "OPENBLAS_NUM_THREADS=%s min_time=%.2f reps=%d warmup=%d\n",
        n, static_cast<long long>(kGlobalBatch), parts.c_str(), dir.c_str(),
        static_cast<long long>(train.features.size(0)), load_s, get_num_threads(), usable_cores(),
        std::getenv("OPENBLAS_NUM_THREADS") ? std::getenv("OPENBLAS_NUM_THREADS") : "unset",
        min_time, reps, warmup);
    std::fflush(stdout);
  }
  // Every configuration is built and warmed up first; then the rounds go round-robin over the
  // configurations, so that a change of machine load affects them alike.
  std::vector<std::unique_ptr<Runner>> runners;
  for (const Config& c : configs)
    if (only.empty() || listed(only, c.name))
      runners.push_back(std::make_unique<Runner>(c, g, train));
  for (auto& r : runners) r->warm_up(warmup, min_time);
  for (int round = 0; round < reps; ++round)
    for (auto& r : runners) r->round();
  if (rank == 0)
    for (const auto& r : runners) r->report();
  dist::finalize_mpi();
  return 0;
}
