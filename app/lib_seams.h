// TEMPORARY seam between the CLI and the library readers being built on another branch
// (readers: IDX + CSV). Each function forwards to the agreed API
// (notes/apis.md) when its header is present in this build and otherwise throws
// lockstep::Error("... not built yet"). Removed once the readers are merged: the CLI then calls the
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
