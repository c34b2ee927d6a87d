// The memory a training run needs (see memory_budget.h).
#include "guards/memory_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/error.h"
#include "cli/message_text.h"

namespace lockstep::app {
namespace {

constexpr long double kFloat = 4.0L;
constexpr long double kEvalBudget = 256.0L * 1024 * 1024;
constexpr std::int64_t kEvalMaxRows = 8192;
// Per thread that runs kernels (each device's worker and the main thread): OpenBLAS's buffer
// (128 MiB: it loops retrying when an address-space limit denies it), the stack, the allocator's
// arena.
constexpr long double kPerThread = 144.0L * 1024 * 1024;

/// The number after `key` in a "Key:   123 kB" file (/proc/meminfo, /proc/self/status), in bytes.
std::optional<long double> kib_field(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      std::istringstream s(line.substr(key.size()));
      long double kib = 0;
      if (s >> kib) return kib * 1024.0L;
    }
  return std::nullopt;
}

/// A number alone in a file (cgroup files); unset for "max", a missing file or a limit too large
/// to mean anything (cgroup v1 writes 2^63 - 4096 for none).
std::optional<long double> number_in(const std::string& path) {
  std::ifstream in(path);
  long double v = 0;
  if (!(in >> v) || v >= 1e18L) return std::nullopt;
  return v;
}

/// The room left under the memory limits of this process's cgroups: the tightest, over its own
/// group and each ancestor, of the limit less the usage — cgroup v2's memory.max and
/// memory.current, and cgroup v1's memory controller's memory.limit_in_bytes and
/// memory.usage_in_bytes (a v1 machine may hold both hierarchies). The groups are read from
/// /proc/self/cgroup under the mount /sys/fs/cgroup; tests point both elsewhere with
/// LOCKSTEP_TEST_CGROUP_ROOT (its `cgroup` file and `fs` directory). Unset when no group has a
/// limit.
std::optional<AvailableMemory> cgroup_room() {
  const char* test_root = std::getenv("LOCKSTEP_TEST_CGROUP_ROOT");
  const bool test = test_root != nullptr && *test_root != '\0';
  const std::string mount = test ? std::string(test_root) + "/fs" : "/sys/fs/cgroup";
  std::optional<AvailableMemory> best;
  // `group` and its ancestors up to the hierarchy's root (which a cgroup namespace may make
  // this process's own group; a real root group has no limit files).
  auto walk = [&best](const std::string& base, std::string group, const std::string& limit_file,
                      const std::string& usage_file, const std::string& source) {
    while (!group.empty() && group.back() == '/') group.pop_back();
    for (;;) {
      const auto limit = number_in(base + group + "/" + limit_file);
      const auto used = number_in(base + group + "/" + usage_file);
      if (limit && used && (!best || *limit - *used < best->bytes))
        best = AvailableMemory{std::max(0.0L, *limit - *used), source};
      if (group.empty()) return;
      group.erase(group.rfind('/'));
    }
  };
  std::ifstream self(test ? std::string(test_root) + "/cgroup" : "/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    // Built by append: GCC 12 at -O3 sees a false -Wrestrict in "," + std::string&&.
    std::string controllers(1, ',');
    controllers.append(line, a + 1, b - a - 1).append(1, ',');
    const std::string group = line.substr(b + 1);
    if (line.rfind("0::", 0) == 0)
      walk(mount, group, "memory.max", "memory.current", "the cgroup's memory.max");
    else if (controllers.find(",memory,") != std::string::npos)
      walk(mount + "/memory", group, "memory.limit_in_bytes", "memory.usage_in_bytes",
           "the cgroup's memory.limit_in_bytes");
  }
  return best;
}

}  // namespace

std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> best;
  auto consider = [&best](std::optional<AvailableMemory> a) {
    if (a && (!best || a->bytes < best->bytes)) best = a;
  };
  if (const auto avail = kib_field("/proc/meminfo", "MemAvailable:"))
    consider(AvailableMemory{*avail, "MemAvailable"});
  consider(cgroup_room());
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const long double size = kib_field("/proc/self/status", "VmSize:").value_or(0.0L);
    consider(
        AvailableMemory{std::max(0.0L, static_cast<long double>(as.rlim_cur) - size), "ulimit -v"});
  }
  return best;
}

MemoryNeed mlp_memory_need(const MlpSpec& spec) {
  MemoryNeed need;
  for (std::size_t i = 0; i + 1 < spec.sizes.size(); ++i) {
    const auto in = static_cast<long double>(spec.sizes[i]);
    const auto out = static_cast<long double>(spec.sizes[i + 1]);
    need.params += in * out + out;
    need.activations_per_sample += 2.0L * out;  // the Linear's output and its activation's
  }
  return need;
}

MemoryNeed gpt_memory_need(const GptSpec& spec, std::int64_t vocab_size) {
  const auto c = static_cast<long double>(spec.embd), t = static_cast<long double>(spec.block);
  const auto v = static_cast<long double>(vocab_size);
  const auto layers = static_cast<long double>(spec.layers);
  MemoryNeed need;
  need.params = c * (v + t) + 12.0L * c * c * layers;
  need.activations_per_sample = t * (18.0L * c * layers + 2.0L * v);
  return need;
}

int optimizer_state_slots(const std::string& optimizer, double momentum) {
  if (optimizer == "sgd") return momentum != 0 ? 1 : 0;
  return 2;
}

MemoryNeed resnet20_memory_need(const std::vector<std::int64_t>& sample) {
  MemoryNeed need;
  const auto channels = static_cast<long double>(sample.empty() ? 1 : sample[0]);
  need.params = resnet20_parameters(channels, kResnet20Classes);
  if (sample.size() != 3) return need;
  // What resnet20's forward keeps for backward, walked in its order: the stem's conv1, bn1, relu
  // (3 of its output's size); per BasicBlock conv1, bn1, relu, conv2, bn2, the sum and the relu
  // (7 of its output's size; a projection's conv and BatchNorm: 2 more); the pooled 64 values
  // and the 10 logits. An estimate from BasicBlock::forward, not measured from autograd.
  long double h = static_cast<long double>(sample[1]), w = static_cast<long double>(sample[2]);
  need.activations_per_sample = 3.0L * 16.0L * h * w + 3.0L * 7.0L * 16.0L * h * w;
  for (const long double width : {32.0L, 64.0L}) {
    // The stage's first block: a 3x3 convolution (padding 1) and a 1x1 projection, stride 2.
    h = std::floor((h - 1.0L) / 2.0L) + 1.0L, w = std::floor((w - 1.0L) / 2.0L) + 1.0L;
    need.activations_per_sample += (9.0L + 2.0L * 7.0L) * width * h * w;
  }
  need.activations_per_sample += 64.0L + static_cast<long double>(kResnet20Classes);
  return need;
}

MemoryNeed spec_memory_need(const ModelSpec& spec, const LoadedData& data) {
  if (spec.mlp) return mlp_memory_need(*spec.mlp);
  const std::vector<std::int64_t> shape = data.train_x.shape().vec();
  const std::vector<std::int64_t> sample(shape.begin() + (shape.empty() ? 0 : 1), shape.end());
  if (!spec.network.empty()) return resnet20_memory_need(sample);
  MemoryNeed need;
  if (spec.layers.empty()) return need;
  need.params = parameter_count(spec.layers, spec.where);
  for (const auto& out : layer_output_shapes(spec.layers, spec.where,
                                             std::vector<long double>(sample.begin(), sample.end()))) {
    long double values = 1.0L;
    for (const long double d : out) values *= d;
    need.activations_per_sample += values;  // each layer's output
  }
  return need;
}

void check_inference_memory(const std::string& what, const std::string& command,
                            const MemoryNeed& need, long double file_bytes, std::int64_t rows) {
  const std::optional<AvailableMemory> have = available_memory();
  if (!have) return;  // unknown: let the allocator decide
  const long double weights = need.params * kFloat;
  const long double activations =
      need.activations_per_sample * kFloat * static_cast<long double>(rows);
  const long double runtime = kPerThread * 2.0L;
  const long double total = weights + 2.0L * file_bytes + activations + runtime;
  if (total <= have->bytes) return;
  char count[64];
  std::snprintf(count, sizeof count, need.params < 1e15L ? "%.0Lf" : "%.3Lg", need.params);
  throw ValueError(what + ": " + command + " needs about " + human_bytes(total) +
                   " of memory, more than the " + human_bytes(have->bytes) + " available (" +
                   have->source + "): the weights of " + count + " parameters (" +
                   human_bytes(weights) + "), the --weights file read and parsed (" +
                   human_bytes(2.0L * file_bytes) + "), the activations of " +
                   std::to_string(rows) + (rows == 1 ? " row" : " rows") + " at a time (" +
                   human_bytes(activations) + "), BLAS buffers and threads (" +
                   human_bytes(runtime) + ") (use a smaller model, or a machine with more memory)");
}

std::int64_t eval_chunk_rows(const MemoryNeed& need) {
  if (need.activations_per_sample <= 0) return kEvalMaxRows;
  const long double rows = kEvalBudget / (need.activations_per_sample * kFloat);
  return rows >= kEvalMaxRows ? kEvalMaxRows
                              : std::max<std::int64_t>(1, static_cast<std::int64_t>(rows));
}

int zero_state_shards(const TrainOptions& o, int world) { return o.zero && world > 1 ? world : 1; }

void check_training_memory(const std::string& what, const MemoryNeed& need, std::int64_t replicas,
                           int optimizer_slots, int state_shards, int world, std::int64_t batch,
                           const std::string& note) {
  const std::optional<AvailableMemory> have = available_memory();
  if (!have) return;  // unknown: let the allocator decide
  const long double weights = need.params * kFloat;
  const long double grad_copies = static_cast<long double>(replicas > 1 ? replicas + 1 : 1);
  // --zero: this rank's shard, ceil(params / ranks) elements per slot. It approximates the
  // partition (src/parallel/zero_partition.cpp), which cuts each DDP bucket of m elements into
  // chunks of ceil(m / ranks): a shard exceeds params / ranks by less than one element a bucket.
  const long double shard = std::ceil(need.params / static_cast<long double>(state_shards));
  const long double state =
      weights * (1.0L + grad_copies) + shard * kFloat * static_cast<long double>(optimizer_slots);
  const long double activations =
      need.activations_per_sample * kFloat * 2.0L * static_cast<long double>(batch);
  const long double evaluation = std::min(
      kEvalBudget, need.activations_per_sample * kFloat * static_cast<long double>(kEvalMaxRows));
  const long double runtime = kPerThread * static_cast<long double>(replicas + 1);
  const long double total = state + activations + evaluation + runtime;
  if (total <= have->bytes) return;
  char count[64];
  std::snprintf(count, sizeof count, need.params < 1e15L ? "%.0Lf" : "%.3Lg", need.params);
  throw ValueError(
      what + ": training needs about " + human_bytes(total) + " of memory, more than the " +
      human_bytes(have->bytes) + " available (" + have->source + "): the weights of " + count +
      " parameters (" + human_bytes(weights) + "), their gradients (" +
      (replicas > 1 ? std::to_string(replicas) + " devices' and the reduced ones"
                    : std::string("one copy")) +
      ") and optimizer state (" + std::to_string(optimizer_slots) + " per weight" +
      (state_shards > 1 ? ", this rank's 1/" + std::to_string(state_shards) + " of it with --zero"
                        : std::string()) +
      "): " + human_bytes(state) + "; the activations of a batch of " + std::to_string(batch) +
      ": " + human_bytes(activations) + "; evaluation: " + human_bytes(evaluation) +
      "; BLAS buffers and threads: " + human_bytes(runtime) +
      (world > 1 && state_shards == 1 && optimizer_slots > 0
           ? " (use a smaller --model or --batch-size, fewer --devices, or --zero to keep 1/" +
                 std::to_string(world) + " of the optimizer state on each rank)"
           : std::string(" (use a smaller --model or --batch-size, or fewer --devices)")) +
      note);
}

std::string spec_name(const ModelSpec& spec) {
  // resnet20's `where` already names it ("--model resnet20"); a layer list's names the source.
  return spec.mlp               ? "--model " + spec.mlp->str()
         : spec.network.empty() ? spec.where + " " + spec.str()
                                : spec.where;
}

}  // namespace lockstep::app
