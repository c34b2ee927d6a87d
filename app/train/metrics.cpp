// Epoch lines, summary line and the metrics log (see metrics.h).
#include "train/metrics.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"

namespace lockstep::app {
namespace {

std::string fixed(std::optional<double> v, int decimals) {
  if (!v) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, *v);
  return buf;
}

}  // namespace

std::string epoch_line(const EpochStats& s) {
  return "epoch " + std::to_string(s.epoch) + "/" + std::to_string(s.epochs) + " train_loss " +
         fixed(s.train_loss, 4) + " val_loss " + fixed(s.val_loss, 4) + " val_acc " +
         fixed(s.val_accuracy, 4) + " samples/s " + fixed(s.samples_per_second, 0);
}

std::string summary_line(std::int64_t epochs, std::optional<double> val_loss,
                         std::optional<double> val_accuracy, double seconds,
                         const std::vector<Device>& devices, int world_size) {
  return "done: " + std::to_string(epochs) + " epochs, val_loss " + fixed(val_loss, 4) +
         " val_acc " + fixed(val_accuracy, 4) + ", " + fixed(seconds, 1) +
         " s, devices=" + device_list(devices) + " world_size=" + std::to_string(world_size);
}

std::string iter_line(const IterStats& s) {
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.6g", s.lr);
  return "iter " + std::to_string(s.iter) + "/" + std::to_string(s.max_iters) + " train_loss " +
         fixed(s.train_loss, 4) + " val_loss " + fixed(s.val_loss, 4) + " lr " + lr + " tokens/s " +
         fixed(s.tokens_per_second, 0);
}

std::string iter_summary_line(std::int64_t iters, std::optional<double> val_loss, double seconds,
                              double tokens_per_second, const std::vector<Device>& devices,
                              int world_size) {
  return "done: " + std::to_string(iters) + " iterations, val_loss " + fixed(val_loss, 4) + ", " +
         fixed(seconds, 1) + " s, tokens/s " + fixed(tokens_per_second, 0) +
         ", devices=" + device_list(devices) + " world_size=" + std::to_string(world_size);
}

MetricsLog::MetricsLog(std::string path, std::optional<std::int64_t> resumed_epochs,
                       std::string key)
    : path_(std::move(path)), resumed_epochs_(resumed_epochs), key_(std::move(key)) {}

void MetricsLog::start() {
  std::string kept;
  if (resumed_epochs_) {
    std::ifstream in(path_, std::ios::binary);
    for (std::string line; in && std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains(key_) && j[key_].is_number_integer() &&
          j[key_].get<std::int64_t>() <= *resumed_epochs_)
        kept += line + "\n";
    }
  }
  if (resumed_epochs_) {
    io::write_file_atomic(path_, kept);
  } else {  // a fresh run starts the file anew
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || std::fclose(f) != 0)
      throw IoError("--metrics " + path_ + ": cannot create: " + std::strerror(errno));
  }
  started_ = true;
}

void MetricsLog::append(const EpochStats& s, const std::vector<Device>& devices, int world_size) {
  nlohmann::json j;
  j["epoch"] = s.epoch;
  j["train_loss"] = s.train_loss;
  j["val_loss"] = s.val_loss ? nlohmann::json(*s.val_loss) : nlohmann::json(nullptr);
  j["val_accuracy"] = s.val_accuracy ? nlohmann::json(*s.val_accuracy) : nlohmann::json(nullptr);
  j["samples_per_second"] = s.samples_per_second;
  j["seconds"] = s.seconds;
  write_line(j, devices, world_size);
}

void MetricsLog::write_line(nlohmann::json& j, const std::vector<Device>& devices, int world_size) {
  nlohmann::json names = nlohmann::json::array();
  for (const Device& d : devices) names.push_back(d.str());
  j["devices"] = names;
  j["world_size"] = world_size;
  const std::string line = j.dump() + "\n";
  if (!started_) start();
  std::FILE* f = std::fopen(path_.c_str(), "ab");
  if (f == nullptr) throw IoError("--metrics " + path_ + ": cannot open: " + std::strerror(errno));
  const bool ok = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  const int saved = errno;
  if (std::fclose(f) != 0 || !ok)
    throw IoError("--metrics " + path_ + ": cannot write: " + std::strerror(ok ? errno : saved));
}

void MetricsLog::append(const IterStats& s, const std::vector<Device>& devices, int world_size) {
  nlohmann::json j;
  j["iter"] = s.iter;
  j["train_loss"] = s.train_loss;
  j["val_loss"] = s.val_loss ? nlohmann::json(*s.val_loss) : nlohmann::json(nullptr);
  j["tokens_per_second"] = s.tokens_per_second;
  j["lr"] = s.lr;
  write_line(j, devices, world_size);
}

}  // namespace lockstep::app
