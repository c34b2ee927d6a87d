// MNIST IDX readers (format: http://yann.lecun.com/exdb/mnist/), with gzip via zlib.
#include "lockstep/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/io/atomic_file.h"

namespace lockstep::data {

namespace {

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Incremental gzip decompression (zlib, inflateInit2 with 16 + MAX_WBITS = gzip wrapper only).
// Concatenated gzip members are decompressed one after another, as gzip -d does.
class GzipInflater {
 public:
  GzipInflater(std::string_view in, const std::string& name) : name_(name) {
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs_.avail_in = 0;
    remaining_ = in.size();
    int rc = inflateInit2(&zs_, 16 + MAX_WBITS);
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    if (rc != Z_OK)
      throw DataError(name_ + ": gzip: inflateInit2 failed (zlib error " + std::to_string(rc) +
                      ")");
  }
  ~GzipInflater() { inflateEnd(&zs_); }
  GzipInflater(const GzipInflater&) = delete;
  GzipInflater& operator=(const GzipInflater&) = delete;

  // Appends decompressed bytes to `out` until out.size() == target or the data ends. Returns
  // true when the whole gzip data has been decompressed (out.size() may still be < target).
  bool fill(std::string& out, std::size_t target) {
    while (out.size() < target) {
      if (finished_) return true;
      if (zs_.avail_in == 0 && remaining_ > 0) {
        auto chunk =
            static_cast<uInt>(std::min<std::size_t>(remaining_, std::numeric_limits<uInt>::max()));
        zs_.avail_in = chunk;
        remaining_ -= chunk;
      }
      std::size_t old = out.size();
      std::size_t want = std::min<std::size_t>(target - old, std::size_t{1} << 20);
      out.resize(old + want);
      zs_.next_out = reinterpret_cast<Bytef*>(out.data() + old);
      zs_.avail_out = static_cast<uInt>(want);
      int rc = inflate(&zs_, Z_NO_FLUSH);
      out.resize(old + (want - zs_.avail_out));
      if (rc == Z_STREAM_END) {
        if (zs_.avail_in == 0 && remaining_ == 0) {
          finished_ = true;
        } else if (inflateReset(&zs_) != Z_OK) {
          throw DataError(name_ + ": corrupt gzip data (cannot start the next gzip member)");
        }
        continue;
      }
      if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR)
        throw DataError(name_ + ": corrupt gzip data (zlib: " + (zs_.msg ? zs_.msg : "data error") +
                        ")");
      if (rc == Z_MEM_ERROR) throw std::bad_alloc();
      // Z_OK or Z_BUF_ERROR: inflate stopped with room left in the output buffer, so it needs
      // more input; when there is none the gzip stream is cut short.
      if (zs_.avail_out != 0 && zs_.avail_in == 0 && remaining_ == 0)
        throw DataError(name_ +
                        ": truncated gzip stream (the compressed data ends before the "
                        "end of the gzip stream)");
    }
    return finished_;
  }

 private:
  z_stream zs_{};
  std::size_t remaining_ = 0;  // input bytes not yet handed to zlib
  bool finished_ = false;
  const std::string& name_;
};

const char* idx_type_name(unsigned type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
    default:
      return nullptr;
  }
}

std::string hex_byte(unsigned v) {
  const char* digits = "0123456789ABCDEF";
  return std::string("0x") + digits[(v >> 4) & 0xF] + digits[v & 0xF];
}

std::uint32_t read_be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

struct IdxData {
  std::vector<std::int64_t> dims;
  bool gzipped = false;
  std::string storage;               // the decompressed file (gzip input only)
  std::size_t offset = 0, size = 0;  // the elements: exactly prod(dims) bytes at `offset`

  // The elements, inside `storage` or inside the caller's `bytes` (offsets, not a view, so a
  // moved IdxData stays valid even when `storage` is in its small-string buffer).
  std::string_view payload(std::string_view bytes) const {
    return (gzipped ? std::string_view(storage) : bytes).substr(offset, size);
  }
};

// Validates the header of an unsigned-byte IDX file of `want_dims` dimensions ("images" /
// "labels" in `what`) and returns its dims and payload. `bytes` may be gzipped.
IdxData parse_idx(std::string_view bytes, const std::string& name, int want_dims,
                  const char* what) {
  IdxData r;
  const bool gz = is_gzip(bytes);
  std::optional<GzipInflater> inflater;
  std::string_view data = bytes;
  bool ended = true;
  auto need = [&](std::size_t n) {
    // Makes at least n bytes of the (decompressed) file available, if the file has them.
    if (gz && r.storage.size() < n && !ended) ended = inflater->fill(r.storage, n);
    if (gz) data = r.storage;
    return data.size() >= n;
  };
  if (gz) {
    inflater.emplace(bytes, name);
    ended = false;
  }
  const std::string prefix = name + ": IDX " + what + ": ";
  if (!need(4))
    throw DataError(prefix + "file too short for the 4-byte IDX magic number (" +
                    std::to_string(data.size()) + " bytes)");
  auto* u = reinterpret_cast<const unsigned char*>(data.data());
  if (u[0] != 0 || u[1] != 0)
    throw DataError(prefix + "wrong magic number (the first two bytes are " + hex_byte(u[0]) + " " +
                    hex_byte(u[1]) + ", expected 0x00 0x00; not an IDX file)");
  const unsigned type = u[2];
  const unsigned ndims = u[3];
  if (type != 0x08) {
    const char* tn = idx_type_name(type);
    throw DataError(prefix + "unsupported element type " + hex_byte(type) +
                    (tn ? std::string(" (") + tn + ")" : std::string(" (not an IDX type)")) +
                    "; only 0x08 (unsigned byte) is supported");
  }
  if (static_cast<int>(ndims) != want_dims)
    throw DataError(prefix + "expected " + std::to_string(want_dims) + " dimension" +
                    (want_dims == 1 ? " (N)" : "s (N, rows, cols)") + ", the header declares " +
                    std::to_string(ndims) + " (magic 0x0000" + hex_byte(type).substr(2) +
                    hex_byte(ndims).substr(2) + ")");
  const std::size_t header = 4 + 4 * std::size_t{ndims};
  if (!need(header))
    throw DataError(prefix + "file too short for its header: " + std::to_string(header) +
                    " bytes expected, " + std::to_string(data.size()) + " present");
  u = reinterpret_cast<const unsigned char*>(data.data());
  constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 40;  // more than any real file
  std::uint64_t count = 1;  // product of the dims while it stays <= kMaxElements
  bool huge = false;
  for (unsigned i = 0; i < ndims; ++i) {
    std::uint32_t d = read_be32(u + 4 + 4 * i);
    if (d == 0)
      throw DataError(prefix + "dimension " + std::to_string(i) + " is 0 (the file holds no " +
                      what + ")");
    r.dims.push_back(d);
    if (count > kMaxElements / d)
      huge = true;
    else
      count *= d;
  }
  std::string dims_str;
  for (std::size_t i = 0; i < r.dims.size(); ++i)
    dims_str += (i ? " x " : "") + std::to_string(r.dims[i]);
  if (huge)  // more than 1 TiB (the product may not even fit 64 bits): no such file exists
    throw DataError(prefix + "truncated: the header declares " + dims_str +
                    " elements (more than 2^40 bytes), the file has " +
                    std::to_string(bytes.size()) + (gz ? " compressed" : "") + " bytes");
  const std::size_t expected = header + static_cast<std::size_t>(count);
  if (gz && !ended) {
    // Decompress at most one byte more than declared: enough to detect trailing data, and a
    // bound on the memory a decompression bomb can take.
    r.storage.reserve(std::min<std::size_t>(expected + 1, bytes.size() * 1100 + 4096));
  }
  need(expected + 1);
  if (data.size() < expected)
    throw DataError(
        prefix + "truncated: the header declares " + dims_str + " = " + std::to_string(count) +
        " bytes of data, the file has " + std::to_string(data.size() - header) + " bytes of data" +
        (gz ? " after decompression" : "") + " (expected file size " + std::to_string(expected) +
        " bytes, actual " + std::to_string(data.size()) + ")");
  if (data.size() > expected)
    throw DataError(prefix + "trailing data: the header declares " + dims_str + " = " +
                    std::to_string(count) + " bytes of data, but the file is longer than the " +
                    std::to_string(expected) + " bytes that implies" +
                    (gz ? " (after decompression)" : "") + " (" + std::to_string(data.size()) +
                    (gz ? " or more" : "") + " bytes)");
  r.gzipped = gz;
  r.offset = header;
  r.size = static_cast<std::size_t>(count);
  return r;
}

// The pixels of a parsed image file, [N, rows · cols] / 255.
Tensor images_of(const IdxData& d, std::string_view bytes) {
  const std::int64_t n = d.dims[0], features = d.dims[1] * d.dims[2];
  Tensor out = empty({n, features}, kFloat32);
  float* dst = out.data_ptr<float>();
  const std::string_view payload = d.payload(bytes);
  auto* src = reinterpret_cast<const unsigned char*>(payload.data());
  const std::size_t total = payload.size();
  for (std::size_t i = 0; i < total; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  return out;
}

}  // namespace

Tensor parse_idx_images(std::string_view bytes, const std::string& name) {
  return images_of(parse_idx(bytes, name, 3, "images"), bytes);
}

Tensor parse_idx_labels(std::string_view bytes, const std::string& name) {
  IdxData d = parse_idx(bytes, name, 1, "labels");
  const std::int64_t n = d.dims[0];
  Tensor out = empty({n}, kInt64);
  std::int64_t* dst = out.data_ptr<std::int64_t>();
  auto* src = reinterpret_cast<const unsigned char*>(d.payload(bytes).data());
  for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i];
  return out;
}

Tensor read_idx_images(const std::string& path) {
  return parse_idx_images(io::read_file(path), path);
}

Tensor read_idx_labels(const std::string& path) {
  return parse_idx_labels(io::read_file(path), path);
}

LabeledData read_idx(const std::string& images_path, const std::string& labels_path) {
  const std::string bytes = io::read_file(images_path);
  const IdxData images = parse_idx(bytes, images_path, 3, "images");
  LabeledData r{images_of(images, bytes), read_idx_labels(labels_path),
                {images.dims[1], images.dims[2]}};
  const std::int64_t ni = r.features.size(0), nl = r.labels.size(0);
  if (ni != nl)
    throw DataError("read_idx: image/label count mismatch: '" + images_path + "' has " +
                    std::to_string(ni) + " images but '" + labels_path + "' has " +
                    std::to_string(nl) + " labels");
  return r;
}

TrainTest load_mnist_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  auto find = [&](const std::string& base, const char* what) {
    std::vector<std::string> tried;
    for (const std::string& name : {base, base + ".gz"}) {
      std::string p = (fs::path(dir) / name).string();
      std::error_code ec;
      if (fs::exists(p, ec)) return p;
      tried.push_back(p);
    }
    throw IoError("load_mnist_dir: " + std::string(what) + " not found in '" + dir + "' (tried " +
                  tried[0] + ", " + tried[1] + ")");
  };
  std::string train_images = find("train-images-idx3-ubyte", "training images");
  std::string train_labels = find("train-labels-idx1-ubyte", "training labels");
  std::string test_images = find("t10k-images-idx3-ubyte", "test images");
  std::string test_labels = find("t10k-labels-idx1-ubyte", "test labels");
  TrainTest r;
  r.train = read_idx(train_images, train_labels);
  r.test = read_idx(test_images, test_labels);
  auto dims = [](const LabeledData& d) {
    return std::to_string(d.image_size[0]) + "x" + std::to_string(d.image_size[1]);
  };
  if (r.train.image_size != r.test.image_size)
    throw DataError("load_mnist_dir: training images '" + train_images + "' are " +
                    dims(r.train) + " pixels, test images '" + test_images + "' " +
                    dims(r.test));
  return r;
}

}  // namespace lockstep::data
