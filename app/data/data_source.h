// Where `lockstep train` / `lockstep eval` get their rows: the --data spec, the readers behind
// each kind, and the train/validation split (--val-fraction).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "cli/options.h"

namespace lockstep::app {

/// A parsed --data value.
struct DataSpec {
  enum class Kind { Synthetic, FashionMnist, Idx, Csv, Text, TextBytes };
  Kind kind = Kind::Synthetic;
  /// synthetic: none; fashion-mnist: the directory; idx: 2 or 4 files (train images, train
  /// labels[, validation images, validation labels]); csv: 1 or 2 files (train[, validation]);
  /// text, text-bytes: the file (text_data.h; trains gpt: models, not load_data's rows).
  std::vector<std::string> paths;
  /// True when the data brings its own validation part (Fashion-MNIST's test set, idx with 4
  /// files, csv with 2 files).
  bool has_validation_part() const;
};

/// Parses `synthetic`, `fashion-mnist`, `fashion-mnist:DIR`, `idx:TI,TL[,VI,VL]`,
/// `csv:TRAIN[,VAL]`, `text:FILE`, `text-bytes:FILE`. Throws ValueError naming the text for
/// anything else (unknown kind, wrong number of paths, an empty path).
DataSpec parse_data_spec(const std::string& text);

/// Rows ready for training: features [N, F] float32 and labels [N] int64 for each part.
struct LoadedData {
  Tensor train_x, train_y;
  /// Undefined when validation is off (--val-fraction 0) or the split held out no row.
  Tensor val_x, val_y;
  /// Names used in messages: the training file(s) and the validation file(s) (or "the last N
  /// rows of ..."), e.g. "train.csv".
  std::string train_name, val_name;
  /// Feature columns F, classes C = max label + 1 over train and validation rows.
  std::int64_t features = 0, classes = 0;
  /// [H, W] of each image when the rows are IDX images (fashion-mnist, idx:): a convolutional
  /// model sees them as [N, F / (H·W), H, W] (shape_for_model); empty for CSV and synthetic data.
  std::vector<std::int64_t> image_size;
  bool synthetic = false;
  bool has_validation() const { return val_x.defined(); }
};

/// The reference program's data set (1000 x 10 standard-normal features, then labels drawn by
/// randint(0, 2)) from the default generator, which it reseeds with `seed` first (the model
/// drawn next continues the same stream, as in the reference program).
void draw_synthetic(std::uint64_t seed, Tensor& x, Tensor& y);

/// Loads what `options.spec` names through the library readers (data::read_csv, data::read_idx,
/// data::load_mnist_dir) and splits it: data without a validation part keeps its first
/// N - floor(N * F) rows for training and holds out the rest (F = --val-fraction, default 0.2;
/// F = 0 turns validation off, as the reference program's 800/200 split of 1000 rows). Data with
/// a validation part uses it, or none with --val-fraction 0.
/// Throws IoError (unreadable file) and DataError (malformed file, feature counts of the parts
/// differ) naming the file, ValueError for a bad spec or fraction, a split leaving no
/// training row, or text data (which trains gpt: models only, see text_data.h).
LoadedData load_data(const DataOptions& options);

/// All rows of `data` (training rows then validation rows), for `lockstep eval --val-fraction 0`.
void all_rows(const LoadedData& data, Tensor& x, Tensor& y);

}  // namespace lockstep::app
