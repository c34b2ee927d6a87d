// Checkpoint files (see checkpoint.h).
#include "files/checkpoint.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string_view>
#include <system_error>

#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::app {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "lockstep-checkpoint-1";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kSchedulerPrefix = "scheduler.";
/// The metadata keys write_checkpoint gives the position itself; every other key is
/// TrainingPosition::extra.
constexpr std::array<std::string_view, 12> kPositionKeys{
    "format",           "epoch",          "batch_in_epoch", "global_step",
    "dp_step_count",    "epoch_loss_sum", "epoch_samples",  "generator_seed",
    "generator_offset", "seed",           "flags",          "unit"};

/// A double as a C99 hex float ("0x1.8p+1"): exact, so a resumed epoch's train_loss continues
/// bit for bit.
std::string hex_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

/// The metadata value under `key`; DataError naming the checkpoint when it is missing.
const std::string& metadata_value(const std::map<std::string, std::string>& md,
                                  const std::string& key, const std::string& path) {
  auto it = md.find(key);
  if (it == md.end())
    throw DataError(path + ": not a lockstep checkpoint: metadata '" + key + "' missing");
  return it->second;
}

template <class T>
T parse_int(const std::map<std::string, std::string>& md, const std::string& key,
            const std::string& path) {
  const std::string& s = metadata_value(md, key, path);
  T v{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size())
    throw DataError(path + ": metadata '" + key + "' is not an integer: '" + s + "'");
  return v;
}

double parse_hex_double(const std::map<std::string, std::string>& md, const std::string& key,
                        const std::string& path) {
  const std::string& s = metadata_value(md, key, path);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size())
    throw DataError(path + ": metadata '" + key + "' is not a number: '" + s + "'");
  return v;
}

/// (complete epochs, batches into the next one) of a checkpoint file name; unset for other names.
std::optional<std::pair<std::int64_t, std::int64_t>> order_key(const std::string& name) {
  static const std::regex epoch_end(R"(epoch-(\d{4,})\.safetensors)");
  static const std::regex mid_epoch(R"(epoch-(\d{4,})-batch-(\d{6,})\.safetensors)");
  static const std::regex iteration(R"(iter-(\d{6,})\.safetensors)");
  std::smatch m;
  try {
    if (std::regex_match(name, m, epoch_end)) return std::make_pair(std::stoll(m[1]), 0LL);
    if (std::regex_match(name, m, iteration)) return std::make_pair(std::stoll(m[1]), 0LL);
    if (std::regex_match(name, m, mid_epoch))
      return std::make_pair(std::stoll(m[1]) - 1, std::stoll(m[2]));
  } catch (const std::out_of_range&) {
  }
  return std::nullopt;
}

}  // namespace

std::string checkpoint_filename(const TrainingPosition& p) {
  char buf[96];
  if (p.by_iteration)
    std::snprintf(buf, sizeof buf, "iter-%06lld.safetensors",
                  static_cast<long long>(p.global_step));
  else if (p.batch_in_epoch == 0)
    std::snprintf(buf, sizeof buf, "epoch-%04lld.safetensors",
                  static_cast<long long>(p.epochs_done));
  else
    std::snprintf(buf, sizeof buf, "epoch-%04lld-batch-%06lld.safetensors",
                  static_cast<long long>(p.epochs_done + 1),
                  static_cast<long long>(p.batch_in_epoch));
  return buf;
}

std::string write_checkpoint(const std::string& dir, const StateDict& model,
                             const StateDict& optimizer, const StateDict& scheduler,
                             const TrainingPosition& p) {
  std::error_code ec;
  fs::create_directories(io::write_target(dir), ec);  // a dangling link's target is created
  if (ec) throw IoError("--checkpoint-dir " + dir + ": cannot create: " + ec.message());
  safetensors::TensorList tensors;
  for (const auto& [name, t] : model) tensors.emplace_back(name, t);
  for (const auto& [name, t] : optimizer) tensors.emplace_back(kOptimizerPrefix + name, t);
  for (const auto& [name, t] : scheduler) tensors.emplace_back(kSchedulerPrefix + name, t);
  std::map<std::string, std::string> metadata{
      {"format", kFormat},
      {"epoch", std::to_string(p.epochs_done)},
      {"batch_in_epoch", std::to_string(p.batch_in_epoch)},
      {"global_step", std::to_string(p.global_step)},
      {"dp_step_count", std::to_string(p.dp_step_count)},
      {"epoch_loss_sum", hex_double(p.epoch_loss_sum)},
      {"epoch_samples", std::to_string(p.epoch_samples)},
      {"generator_seed", std::to_string(p.generator_seed)},
      {"generator_offset", std::to_string(p.generator_offset)},
      {"seed", std::to_string(p.seed)},
      {"flags", p.flags},
  };
  if (p.by_iteration) metadata["unit"] = "iteration";
  for (const auto& [key, value] : p.extra) metadata.emplace(key, value);
  const std::string path = (fs::path(dir) / checkpoint_filename(p)).string();
  safetensors::save_file(tensors, path, metadata);
  return path;
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw IoError("--checkpoint-dir " + dir + ": cannot list: " + ec.message());
  std::optional<std::pair<std::int64_t, std::int64_t>> best;
  std::string best_path;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (io::is_temporary_file(name)) continue;
    auto key = order_key(name);
    if (key && (!best || *key > *best)) best = key, best_path = it->path().string();
  }
  if (ec) throw IoError("--checkpoint-dir " + dir + ": cannot list: " + ec.message());
  if (!best) return std::nullopt;
  return best_path;
}

bool is_checkpoint(const safetensors::File& file) {
  const auto format = file.metadata.find("format");
  return format != file.metadata.end() && format->second == kFormat;
}

Checkpoint read_checkpoint(const std::string& path) {
  return parse_checkpoint(io::read_file(path), path);
}

Checkpoint parse_checkpoint(std::string_view bytes, const std::string& path) {
  safetensors::File file = safetensors::deserialize(bytes, path);
  const auto& md = file.metadata;
  auto format = md.find("format");
  if (format == md.end() || format->second != kFormat)
    throw DataError(path + ": not a lockstep checkpoint (metadata 'format' is not '" +
                    std::string(kFormat) + "')");
  Checkpoint c;
  c.path = path;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0)
      c.optimizer.insert(name.substr(std::string(kOptimizerPrefix).size()), t);
    else if (name.rfind(kSchedulerPrefix, 0) == 0)
      c.scheduler.insert(name.substr(std::string(kSchedulerPrefix).size()), t);
    else
      c.model.insert(name, t);
  }
  TrainingPosition& p = c.position;
  p.epochs_done = parse_int<std::int64_t>(md, "epoch", path);
  p.batch_in_epoch = parse_int<std::int64_t>(md, "batch_in_epoch", path);
  p.global_step = parse_int<std::int64_t>(md, "global_step", path);
  p.dp_step_count = parse_int<std::uint64_t>(md, "dp_step_count", path);
  p.epoch_loss_sum = parse_hex_double(md, "epoch_loss_sum", path);
  p.epoch_samples = parse_int<std::int64_t>(md, "epoch_samples", path);
  p.generator_seed = parse_int<std::uint64_t>(md, "generator_seed", path);
  p.generator_offset = parse_int<std::uint64_t>(md, "generator_offset", path);
  p.seed = parse_int<std::uint64_t>(md, "seed", path);
  p.flags = metadata_value(md, "flags", path);
  p.by_iteration = md.count("unit") > 0 && md.at("unit") == "iteration";
  for (const auto& [key, value] : md)
    if (std::find(kPositionKeys.begin(), kPositionKeys.end(), key) == kPositionKeys.end())
      p.extra.emplace(key, value);
  if (p.epochs_done < 0 || p.batch_in_epoch < 0 || p.global_step < 0 || p.epoch_samples < 0)
    throw DataError(path + ": negative training position in metadata");
  return c;
}

}  // namespace lockstep::app
