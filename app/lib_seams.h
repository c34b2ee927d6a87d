// TEMPORARY seam between the CLI and library pieces that are being built on other branches
// (io: safetensors + atomic writes; readers: IDX + CSV). Each function forwards to the agreed API
// (notes/apis.md) when its header is present in this build and otherwise throws
// lockstep::Error("... not built yet"). Removed once both pieces are merged: the CLI then calls the
// library directly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::app::seams {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// A safetensors file: tensors in file order plus its string metadata.
struct TensorFile {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

/// safetensors::save_file (atomic write).
void save_tensors(const NamedTensors& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata);
/// safetensors::load_file.
TensorFile load_tensors(const std::string& path);
/// io::write_file_atomic.
void write_file_atomic(const std::string& path, std::string_view bytes);
/// io::read_file.
std::string read_file(const std::string& path);
/// io::is_temporary_file.
bool is_temporary_file(const std::string& filename);

/// data::LabeledData.
struct Labeled {
  Tensor features;  // [N, F] float32
  Tensor labels;    // [N] int64
};
/// data::read_csv.
Labeled read_csv(const std::string& path, std::int64_t label_column);
/// data::read_idx.
Labeled read_idx(const std::string& images, const std::string& labels);
/// data::load_mnist_dir: (train, test).
std::pair<Labeled, Labeled> load_mnist_dir(const std::string& dir);
/// data::kFashionMnistDir.
std::string fashion_mnist_dir();

}  // namespace lockstep::app::seams
