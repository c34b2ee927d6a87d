// Readers for MNIST-format IDX files (MNIST, Fashion-MNIST), plain or gzipped.
//
// Format (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS FOR THE MNIST DATABASE"): a 4-byte
// big-endian magic number 0x00 0x00 TYPE NDIMS, then NDIMS big-endian uint32 dimension sizes,
// then the elements in row-major (C) order. TYPE 0x08 is unsigned byte; the other IDX types
// (0x09 signed byte, 0x0B short, 0x0C int, 0x0D float, 0x0E double) are valid IDX but are not
// MNIST images or labels, so these readers refuse them with a DataError naming the type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

#include "lockstep/core/tensor.h"

namespace lockstep::data {

/// Labeled rows: features [N, F] float32, labels [N] int64 (>= 0).
struct LabeledData {
  Tensor features;
  Tensor labels;
  /// [rows, cols] of every image when the rows are IDX images (features = the pixels flattened
  /// row-major, one channel); empty for other data (CSV).
  std::vector<std::int64_t> image_size;
};

/// Reads an IDX image file (magic 0x00000803: unsigned bytes, 3 dims N, rows, cols) into a
/// float32 tensor [N, rows * cols] (each image flattened row-major) with every pixel divided by
/// 255 (so values lie in [0, 1], as torchvision's ToTensor()).
/// A file starting with the gzip magic bytes 1f 8b is decompressed with zlib first, whatever its
/// name. Throws IoError when the file is missing or unreadable, DataError (naming the file) for:
/// wrong magic or element type, not exactly 3 dimensions, a zero dimension, a payload shorter or
/// longer than the dimensions declare (with the expected and actual byte counts), a truncated or
/// corrupt gzip stream.
Tensor read_idx_images(const std::string& path);

/// Reads an IDX label file (magic 0x00000801: unsigned bytes, 1 dim N) into an int64 tensor [N]
/// with values in [0, 255]. Gzip and errors as read_idx_images.
Tensor read_idx_labels(const std::string& path);

/// read_idx_images + read_idx_labels. DataError naming both files and both counts when the
/// number of images differs from the number of labels.
LabeledData read_idx(const std::string& images_path, const std::string& labels_path);

/// Byte-level entry points of the readers above (used by the fuzzers and tests): `bytes` is the
/// file's content, raw or gzipped; `name` (the file path) appears in every error. Throw only
/// DataError.
Tensor parse_idx_images(std::string_view bytes, const std::string& name);
Tensor parse_idx_labels(std::string_view bytes, const std::string& name);

/// Training and test sets of an MNIST-layout directory.
struct TrainTest {
  LabeledData train;
  LabeledData test;
};

/// Reads a directory in the MNIST / Fashion-MNIST layout: train-images-idx3-ubyte,
/// train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each under that
/// name or with ".gz" appended (the plain name is tried first). Throws IoError listing the
/// paths tried when a file is missing, and the errors of read_idx otherwise.
TrainTest load_mnist_dir(const std::string& dir);

/// Where Debian's dataset-fashion-mnist package installs Fashion-MNIST (gzipped IDX files).
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace lockstep::data
