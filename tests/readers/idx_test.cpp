// MNIST IDX reader: valid files (raw, gzipped, multi-member gzip, the real Fashion-MNIST files
// when installed) and one test per kind of bad input. Fixtures are generated into a temporary
// directory; gzip fixtures are made with zlib (deflate with a gzip wrapper, and gzopen).
#include "lockstep/data/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "support/helpers.h"

namespace {

namespace fs = std::filesystem;
using lockstep::DataError;
using lockstep::IoError;
using lockstep::Tensor;
using lockstep::testing::expect_error;
using namespace lockstep::data;

// An IDX file: magic 0x00 0x00 type ndims, big-endian uint32 dims, then `payload`.
std::string make_idx(unsigned type, const std::vector<std::uint32_t>& dims,
                     const std::string& payload) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (auto d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xFF);
  return s + payload;
}

std::string bytes_0_to(std::size_t n) {  // 0, 1, 2, ... (mod 256)
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i % 256);
  return s;
}

// gzip (RFC 1952) of `data` in memory, via zlib's deflate with a gzip wrapper.
std::string gzip(const std::string& data, int level = 6) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2");
  std::string out(deflateBound(&zs, data.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(zs.total_out);
  return out;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("lockstep_idx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // Writes with zlib's gzopen/gzwrite (a real .gz file as gzip(1) would make).
  std::string write_gz(const std::string& name, const std::string& bytes) {
    std::string p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb9");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
    return p;
  }

  fs::path dir_;
};

const std::string kImages = make_idx(0x08, {2, 2, 3},
                                     std::string("\x00\x01\x7f\x80\xfe\xff"
                                                 "\x10\x20\x30\x40\x50\x60",
                                                 12));
const std::string kLabels = make_idx(0x08, {2}, std::string("\x07\x00", 2));

TEST_F(IdxTest, ParsesRawImagesFlattenedAndScaled) {
  Tensor x = parse_idx_images(kImages, "img");
  ASSERT_EQ(x.dtype(), lockstep::kFloat32);
  ASSERT_EQ(x.sizes(), (std::vector<std::int64_t>{2, 6}));
  const unsigned char raw[12] = {0, 1, 127, 128, 254, 255, 16, 32, 48, 64, 80, 96};
  const float* p = x.data_ptr<float>();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(p[i], static_cast<float>(raw[i]) / 255.0f) << i;
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[5], 1.0f);
}

TEST_F(IdxTest, ParsesRawLabels) {
  Tensor y = parse_idx_labels(kLabels, "lab");
  ASSERT_EQ(y.dtype(), lockstep::kInt64);
  EXPECT_EQ(y.to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, 0}));
  // All 256 byte values map to themselves.
  Tensor all = parse_idx_labels(make_idx(0x08, {256}, bytes_0_to(256)), "lab");
  auto v = all.to_vector<std::int64_t>();
  for (int i = 0; i < 256; ++i) EXPECT_EQ(v[i], i);
}

TEST_F(IdxTest, GzipDetectedByMagicNotByName) {
  // gzipped content under a plain name, plain content under a .gz name: both read.
  Tensor a = read_idx_images(write("images.idx", gzip(kImages)));
  Tensor b = read_idx_images(write("images.gz", kImages));
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(a.sizes(), (std::vector<std::int64_t>{2, 6}));
}

TEST_F(IdxTest, ReadsGzopenWrittenFiles) {
  LabeledData d = read_idx(write_gz("i.gz", kImages), write_gz("l.gz", kLabels));
  EXPECT_EQ(d.features.to_vector<float>(), parse_idx_images(kImages, "x").to_vector<float>());
  EXPECT_EQ(d.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, 0}));
}

TEST_F(IdxTest, ReadsConcatenatedGzipMembers) {
  // gzip -d semantics: members are decompressed one after another.
  std::string whole = make_idx(0x08, {3, 10, 10}, bytes_0_to(300));
  Tensor x = parse_idx_images(gzip(whole.substr(0, 100)) + gzip(whole.substr(100)), "multi.gz");
  EXPECT_EQ(x.to_vector<float>(), parse_idx_images(whole, "raw").to_vector<float>());
}

TEST_F(IdxTest, MissingFileIsIoError) {
  std::string p = (dir_ / "nope-idx3-ubyte").string();
  expect_error<IoError>([&] { read_idx_images(p); }, {p, "No such file"});
  expect_error<IoError>([&] { read_idx_labels(p); }, {p});
}

TEST_F(IdxTest, DirectoryIsIoError) {
  expect_error<IoError>([&] { read_idx_images(dir_.string()); }, {dir_.string(), "directory"});
}

TEST_F(IdxTest, WrongMagicIsDataError) {
  std::string p = write("png", "\x89PNG\r\n\x1a\n0000000000000000");
  expect_error<DataError>([&] { read_idx_images(p); }, {p, "wrong magic", "0x89 0x50"});
}

TEST_F(IdxTest, UnsupportedElementTypeIsDataError) {
  // 0x0D = float: a valid IDX type, but not MNIST's unsigned bytes.
  std::string floats = make_idx(0x0D, {1, 1, 1}, std::string(4, '\0'));
  expect_error<DataError>([&] { parse_idx_images(floats, "f.idx"); },
                          {"f.idx", "0x0D", "float", "0x08"});
  expect_error<DataError>([&] { parse_idx_labels(make_idx(0x42, {1}, "x"), "g.idx"); },
                          {"g.idx", "0x42", "not an IDX type"});
}

TEST_F(IdxTest, WrongDimensionCountIsDataError) {
  // A labels file given as images, and an images file given as labels.
  expect_error<DataError>([&] { parse_idx_images(kLabels, "labels.idx"); },
                          {"labels.idx", "expected 3 dimensions", "declares 1", "0x00000801"});
  expect_error<DataError>([&] { parse_idx_labels(kImages, "images.idx"); },
                          {"images.idx", "expected 1 dimension", "declares 3", "0x00000803"});
}

TEST_F(IdxTest, ZeroDimensionIsDataError) {
  expect_error<DataError>(
      [&] {
        parse_idx_images(make_idx(0x08, {0, 28, 28}, ""), "z");
      },
      {"z", "dimension 0 is 0"});
  expect_error<DataError>(
      [&] {
        parse_idx_images(make_idx(0x08, {5, 28, 0}, ""), "z");
      },
      {"z", "dimension 2 is 0"});
}

TEST_F(IdxTest, TruncatedHeaderIsDataError) {
  expect_error<DataError>([&] { parse_idx_labels(std::string("\0\0", 2), "t"); },
                          {"t", "too short", "magic"});
  expect_error<DataError>([&] { parse_idx_images(kImages.substr(0, 9), "t"); },
                          {"t", "too short for its header", "16 bytes expected, 9 present"});
  expect_error<DataError>([&] { parse_idx_labels("", "empty.idx"); }, {"empty.idx"});
}

TEST_F(IdxTest, TruncatedRawPayloadIsDataError) {
  std::string p = write("short", kImages.substr(0, kImages.size() - 5));  // 7 of 12 pixels
  expect_error<DataError>([&] { read_idx_images(p); },
                          {p, "truncated", "2 x 2 x 3 = 12 bytes of data, the file has 7",
                           "expected file size 28 bytes, actual 23"});
}

TEST_F(IdxTest, TrailingBytesAreDataError) {
  std::string p = write("long", kLabels + "xyz");
  expect_error<DataError>([&] { read_idx_labels(p); },
                          {p, "trailing data", "2 = 2 bytes", "10 bytes", "(13 bytes)"});
}

TEST_F(IdxTest, TruncatedGzipIsDataError) {
  std::string gz = gzip(make_idx(0x08, {4, 28, 28}, bytes_0_to(4 * 784)));
  // Cut in the middle of the deflate data, and cut only the 8-byte trailer (CRC32 + size).
  std::string p1 = write("half.gz", gz.substr(0, gz.size() / 2));
  expect_error<DataError>([&] { read_idx_images(p1); }, {p1, "truncated gzip stream"});
  std::string p2 = write("notrailer.gz", gz.substr(0, gz.size() - 8));
  expect_error<DataError>([&] { read_idx_images(p2); }, {p2, "truncated gzip stream"});
  // Only the two magic bytes.
  expect_error<DataError>([&] { parse_idx_images("\x1f\x8b", "magic.gz"); }, {"magic.gz"});
}

TEST_F(IdxTest, CorruptGzipIsDataError) {
  std::string gz = gzip(kImages);
  // Byte 10 starts the deflate data: 0xFF makes the block type 3, which is reserved.
  std::string bad_block = gz;
  bad_block[10] = '\xff';
  std::string p1 = write("badblock.gz", bad_block);
  expect_error<DataError>([&] { read_idx_images(p1); }, {p1, "corrupt gzip", "invalid block type"});
  // A wrong CRC32 in the trailer.
  std::string bad_crc = gz;
  bad_crc[gz.size() - 8] = static_cast<char>(bad_crc[gz.size() - 8] ^ 0x55);
  std::string p2 = write("badcrc.gz", bad_crc);
  expect_error<DataError>([&] { read_idx_images(p2); },
                          {p2, "corrupt gzip", "incorrect data check"});
  // Garbage after the gzip member.
  expect_error<DataError>([&] { parse_idx_images(gz + "garbage!", "trail.gz"); },
                          {"trail.gz", "corrupt gzip"});
}

TEST_F(IdxTest, TruncatedPayloadInsideGzipIsDataError) {
  std::string gz = gzip(kImages.substr(0, kImages.size() - 2));
  expect_error<DataError>(
      [&] { parse_idx_images(gz, "short.gz"); },
      {"short.gz", "truncated", "12 bytes of data, the file has 10", "after decompression"});
}

TEST_F(IdxTest, TrailingBytesInsideGzipAreDataError) {
  expect_error<DataError>([&] { parse_idx_labels(gzip(kLabels + "x"), "long.gz"); },
                          {"long.gz", "trailing data", "after decompression"});
}

TEST_F(IdxTest, DecompressionBombStopsAtDeclaredSize) {
  // 1 label declared, 16 MiB of zeros compressed to ~16 KiB: rejected as trailing data after
  // decompressing at most 1 byte beyond the declared size.
  std::string bomb = gzip(make_idx(0x08, {1}, std::string(16u << 20, '\0')), 9);
  ASSERT_LT(bomb.size(), 100000u);
  expect_error<DataError>([&] { parse_idx_labels(bomb, "bomb.gz"); },
                          {"bomb.gz", "trailing data", "10 or more bytes"});
}

TEST_F(IdxTest, AbsurdDeclaredSizeIsDataError) {
  std::string huge = make_idx(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, "abc");
  expect_error<DataError>([&] { parse_idx_images(huge, "huge"); },
                          {"huge", "truncated", "more than 2^40 bytes", "19 bytes"});
  expect_error<DataError>([&] { parse_idx_images(gzip(huge), "huge.gz"); },
                          {"huge.gz", "compressed bytes"});
  // 2^20 * 2^20 * 2^24 = 2^64 would wrap a 64-bit product to 0.
  std::string wraps = make_idx(0x08, {1u << 20, 1u << 20, 1u << 24}, "abc");
  expect_error<DataError>([&] { parse_idx_images(wraps, "wraps"); },
                          {"wraps", "truncated", "more than 2^40 bytes"});
}

TEST_F(IdxTest, CountMismatchIsDataError) {
  std::string images = write("i", kImages);
  std::string labels = write("l", make_idx(0x08, {3}, "abc"));
  expect_error<DataError>([&] { read_idx(images, labels); },
                          {images, labels, "2 images", "3 labels"});
}

TEST_F(IdxTest, LoadMnistDirAcceptsGzAndPlainNames) {
  std::string train_images = make_idx(0x08, {3, 2, 2}, bytes_0_to(12));
  write_gz("train-images-idx3-ubyte.gz", train_images);
  write("train-labels-idx1-ubyte", make_idx(0x08, {3}, "\x01\x02\x03"));
  write("t10k-images-idx3-ubyte", make_idx(0x08, {1, 2, 2}, "abcd"));
  write_gz("t10k-labels-idx1-ubyte.gz", make_idx(0x08, {1}, "\x09"));
  TrainTest d = load_mnist_dir(dir_.string());
  EXPECT_EQ(d.train.features.sizes(), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(d.train.features.to_vector<float>(),
            parse_idx_images(train_images, "x").to_vector<float>());
  EXPECT_EQ(d.train.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(d.test.features.sizes(), (std::vector<std::int64_t>{1, 4}));
  EXPECT_EQ(d.test.labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{9}));
}

TEST_F(IdxTest, LoadMnistDirMissingFileListsTriedPaths) {
  write("train-images-idx3-ubyte", kImages);
  const std::string base = (dir_ / "train-labels-idx1-ubyte").string();
  expect_error<IoError>([&] { load_mnist_dir(dir_.string()); },
                        {"training labels", base + ",", base + ".gz"});
  expect_error<IoError>([&] { load_mnist_dir((dir_ / "absent").string()); },
                        {"absent/train-images-idx3-ubyte.gz"});
}

// The real Fashion-MNIST files from Debian's dataset-fashion-mnist. Expected values computed with
//   python3 -c 'import gzip; d=gzip.open("train-labels-idx1-ubyte.gz").read()[8:]; ...'
// (plain gzip + bytes arithmetic, no numpy): first train labels 9 0 0 3 0 2 7 2 5 5, first test
// labels 9 2 1 1 6 1 4 6 5 7, 6000 training images per class, train[0]: pixel byte sum 76247,
// bytes 1, 13, 73 at pixels 96, 99, 100, maximum 255 first at pixel 417; test[0] byte sum 33456;
// byte sum over all training pixels 3431114169, over all test pixels 573469082.
TEST(FashionMnist, LoadsDebianPackage) {
  const std::string dir = kFashionMnistDir;
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz") &&
      !fs::exists(fs::path(dir) / "train-images-idx3-ubyte"))
    GTEST_SKIP() << dir << " not installed (Debian package dataset-fashion-mnist)";
  TrainTest d = load_mnist_dir(dir);
  ASSERT_EQ(d.train.features.sizes(), (std::vector<std::int64_t>{60000, 784}));
  ASSERT_EQ(d.train.labels.sizes(), (std::vector<std::int64_t>{60000}));
  ASSERT_EQ(d.test.features.sizes(), (std::vector<std::int64_t>{10000, 784}));
  ASSERT_EQ(d.test.labels.sizes(), (std::vector<std::int64_t>{10000}));

  auto train_labels = d.train.labels.to_vector<std::int64_t>();
  auto test_labels = d.test.labels.to_vector<std::int64_t>();
  EXPECT_EQ(std::vector<std::int64_t>(train_labels.begin(), train_labels.begin() + 10),
            (std::vector<std::int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(std::vector<std::int64_t>(test_labels.begin(), test_labels.begin() + 10),
            (std::vector<std::int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  std::vector<int> per_class(10, 0);
  for (auto l : train_labels) {
    ASSERT_GE(l, 0);
    ASSERT_LE(l, 9);
    ++per_class[static_cast<std::size_t>(l)];
  }
  for (auto l : test_labels) {
    ASSERT_GE(l, 0);
    ASSERT_LE(l, 9);
  }
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));

  // Pixels back to bytes: x * 255 is within 1e-4 of an integer for every x = b / 255.0f.
  auto byte_sum = [](const float* p, std::size_t n) {
    std::uint64_t s = 0;
    for (std::size_t i = 0; i < n; ++i) s += static_cast<std::uint64_t>(std::lround(p[i] * 255.0));
    return s;
  };
  const float* x = d.train.features.data_ptr<float>();
  EXPECT_EQ(byte_sum(x, 784), 76247u);
  EXPECT_EQ(x[96], 1.0f / 255.0f);
  EXPECT_EQ(x[99], 13.0f / 255.0f);
  EXPECT_EQ(x[100], 73.0f / 255.0f);
  EXPECT_EQ(std::max_element(x, x + 784) - x, 417);
  EXPECT_EQ(x[417], 1.0f);
  EXPECT_EQ(byte_sum(x, 60000u * 784u), 3431114169u);
  const float* t = d.test.features.data_ptr<float>();
  EXPECT_EQ(byte_sum(t, 784), 33456u);
  EXPECT_EQ(byte_sum(t, 10000u * 784u), 573469082u);
  float lo = 1, hi = 0;
  for (std::size_t i = 0; i < 60000u * 784u; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

}  // namespace
