// safetensors::serialize / deserialize / save_file / load_file against the format spec
// (https://github.com/huggingface/safetensors) and bytes written by Python's safetensors 0.8.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/tolerance.h"

namespace fs = std::filesystem;
using namespace lockstep;
using lockstep::testing::BitEqual;
namespace st = lockstep::safetensors;

namespace {

/// 8-byte little-endian size + header text + data bytes: a file built by hand.
std::string make_file(const std::string& header, const std::string& data = "") {
  std::string out;
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + data;
}

/// Like make_file with an arbitrary size field.
std::string with_size_field(std::uint64_t n, const std::string& rest) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + rest;
}

/// deserialize must throw DataError whose message names the file and contains every `parts`.
void expect_data_error(const std::string& bytes, std::initializer_list<std::string> parts) {
  const std::string file = "bad/model.safetensors";
  try {
    st::deserialize(bytes, file);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'" + file + "'"), std::string::npos) << msg;
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

Tensor f32(std::vector<float> v, const Shape& s) { return tensor(std::span<const float>(v), s); }
Tensor f64(std::vector<double> v, const Shape& s) { return tensor(std::span<const double>(v), s); }
Tensor i64(std::vector<std::int64_t> v, const Shape& s) {
  return tensor(std::span<const std::int64_t>(v), s);
}

// Written by (safetensors 0.8.0, torch 1.13):
//   from safetensors.torch import save
//   b = save({'b': torch.tensor([1.0, -2.0]), 'a': torch.tensor([[3], [-1]]),
//             's': torch.tensor(2.5, dtype=torch.float64), 'z': torch.zeros(0, 3)},
//            metadata={'format': 'pt'})
// Python orders tensors by alignment, then name; two trailing spaces pad the header to 256.
const std::string kPythonHeader =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"I64","shape":[2,1],"data_offsets":[0,16]},)"
    R"("s":{"dtype":"F64","shape":[],"data_offsets":[16,24]},)"
    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
    R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[32,32]}}  )";
const unsigned char kPythonData[32] = {
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0};
std::string python_file() {
  return make_file(kPythonHeader, std::string(reinterpret_cast<const char*>(kPythonData), 32));
}

}  // namespace

TEST(Safetensors, PythonFileHeaderSizeIs256) {
  const std::string bytes = python_file();
  ASSERT_EQ(bytes.size(), 8u + 256u + 32u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x00\x01\x00\x00\x00\x00\x00\x00", 8));
}

TEST(Safetensors, ReadsBytesWrittenByPython) {
  const st::File f = st::deserialize(python_file(), "python.safetensors");
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].first, "a");
  EXPECT_EQ(f.tensors[1].first, "s");
  EXPECT_EQ(f.tensors[2].first, "b");
  EXPECT_EQ(f.tensors[3].first, "z");
  EXPECT_TRUE(BitEqual(f.at("a"), i64({3, -1}, {2, 1})));
  EXPECT_EQ(f.at("s").dtype(), kFloat64);
  EXPECT_EQ(f.at("s").dim(), 0);
  EXPECT_EQ(f.at("s").item(), 2.5);
  EXPECT_TRUE(BitEqual(f.at("b"), f32({1.0f, -2.0f}, {2})));
  EXPECT_EQ(f.at("z").shape(), (Shape{0, 3}));
  EXPECT_EQ(f.at("z").dtype(), kFloat32);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(Safetensors, SerializeMatchesPythonBytes) {
  const st::TensorList tensors = {{"a", i64({3, -1}, {2, 1})},
                                  {"s", scalar_tensor(2.5, kFloat64)},
                                  {"b", f32({1.0f, -2.0f}, {2})},
                                  {"z", zeros({0, 3})}};
  EXPECT_EQ(st::serialize(tensors, {{"format", "pt"}}), python_file());
}

TEST(Safetensors, RoundTripsAllDtypesAndShapes) {
  const st::TensorList tensors = {
      {"w", f32({1.5f, -2.25f, 3.0f, 4.0f, 5.0f, -6.0f}, {2, 3})},
      {"d", f64({0.1, -1e300, 3.0, 5e-324}, {4})},
      {"i",
       i64({std::numeric_limits<std::int64_t>::min(), 0, std::numeric_limits<std::int64_t>::max()},
           {3, 1})},
      {"scalar_f32", scalar_tensor(-7.5)},
      {"scalar_f64", scalar_tensor(1.0 / 3.0, kFloat64)},
      {"scalar_i64", scalar_tensor(42, kInt64)},
      {"empty_f32", zeros({0})},
      {"empty_f64", zeros({2, 0, 3}, kFloat64)},
      {"empty_i64", zeros({0}, kInt64)},
      {"eight_dims", f32({1.0f, 2.0f}, {1, 1, 1, 1, 1, 1, 1, 2})},
  };
  const std::string bytes = st::serialize(tensors);
  const st::File f = st::deserialize(bytes, "mem");
  ASSERT_EQ(f.tensors.size(), tensors.size());
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    EXPECT_EQ(f.tensors[k].first, tensors[k].first) << "file order is the given order";
    EXPECT_TRUE(BitEqual(f.tensors[k].second, tensors[k].second)) << tensors[k].first;
    EXPECT_EQ(f.tensors[k].second.shape(), tensors[k].second.shape()) << tensors[k].first;
  }
  EXPECT_TRUE(f.metadata.empty());
  // No metadata, no "__metadata__" key (as Python with metadata=None).
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
  // The result is independent of the input buffer.
  EXPECT_FALSE(f.tensors[0].second.requires_grad());
}

TEST(Safetensors, SpecialFloatValuesAreBitExact) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor t = f32({nan, -0.0f, inf, -inf, 1e-45f, 3.4028235e38f}, {6});
  const st::File f = st::deserialize(st::serialize({{"t", t}}), "mem");
  const float* a = t.data_ptr<float>();
  const float* b = f.at("t").data_ptr<float>();
  EXPECT_EQ(std::memcmp(a, b, 6 * sizeof(float)), 0);
}

TEST(Safetensors, HeaderIsPaddedWithSpacesToEightBytes) {
  for (const std::string name :
       {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh"}) {
    const std::string bytes = st::serialize({{name, scalar_tensor(1.0)}});
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
    EXPECT_EQ(n % 8, 0u) << name;
    EXPECT_EQ(bytes.size(), 8 + n + 4) << name;
    const std::string header = bytes.substr(8, n);
    EXPECT_EQ(header.front(), '{');
    const auto close = header.rfind('}');
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << name;
    EXPECT_LT(header.size() - close - 1, 8u);
  }
}

TEST(Safetensors, EmptyFileRoundTrips) {
  const std::string bytes = st::serialize({});
  EXPECT_EQ(bytes, make_file("{}      "));
  const st::File f = st::deserialize(bytes, "mem");
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.metadata.empty());
}

TEST(Safetensors, MetadataRoundTrips) {
  const std::map<std::string, std::string> meta = {
      {"epoch", "3"}, {"rng", "123 456"}, {"empty", ""}, {"utf8 \xc3\xa9", "quote \" and \\ ok"}};
  const st::File f = st::deserialize(st::serialize({{"x", zeros({2})}}, meta), "mem");
  EXPECT_EQ(f.metadata, meta);
  // Metadata with no tensors, and "__metadata__": null, are accepted too.
  EXPECT_EQ(st::deserialize(st::serialize({}, meta), "mem").metadata, meta);
  EXPECT_TRUE(st::deserialize(make_file(R"({"__metadata__":null})"), "mem").metadata.empty());
}

TEST(Safetensors, ZeroSizeTensorsShareOffsets) {
  // Several empty tensors at the same offset, between non-empty ones (as Python writes them).
  const std::string bytes = make_file(R"({"e1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                      R"("e2":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]},)"
                                      R"("b":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})",
                                      std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8));
  const st::File f = st::deserialize(bytes, "mem");
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.tensors[0].first, "a");
  EXPECT_EQ(f.at("a").item(), 1.0);
  EXPECT_EQ(f.at("b").item(), 2.0);
  EXPECT_EQ(f.at("e2").shape(), (Shape{3, 0}));
}

TEST(Safetensors, SaveFileAndLoadFile) {
  const fs::path dir = fs::path(LOCKSTEP_BINARY_DIR) / "io_test_tmp";
  fs::create_directories(dir);
  const std::string path = (dir / "save_load.safetensors").string();
  st::save_file({{"w", f32({1, 2, 3, 4}, {2, 2})}, {"n", scalar_tensor(7, kInt64)}}, path,
                {{"k", "v"}});
  const st::File f = st::load_file(path);
  EXPECT_TRUE(BitEqual(f.at("w"), f32({1, 2, 3, 4}, {2, 2})));
  EXPECT_EQ(f.at("n").item<std::int64_t>(), 7);
  EXPECT_EQ(f.metadata.at("k"), "v");
  fs::remove(path);
}

TEST(Safetensors, StateDictRoundTripLoadsIntoModelStrictly) {
  auto make = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(3, 2)});
  };
  manual_seed(1);
  auto a = make();
  manual_seed(2);
  auto b = make();
  const fs::path dir = fs::path(LOCKSTEP_BINARY_DIR) / "io_test_tmp";
  fs::create_directories(dir);
  const std::string path = (dir / "state_dict.safetensors").string();
  st::save_state_dict(a->state_dict(), path);
  const StateDict loaded = st::to_state_dict(st::load_file(path));
  EXPECT_EQ(loaded.keys(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  b->load_state_dict(loaded, /*strict=*/true);
  for (const auto& [name, t] : a->state_dict())
    EXPECT_TRUE(BitEqual(b->state_dict().at(name), t)) << name;
  fs::remove(path);
}

TEST(Safetensors, AtThrowsStateDictErrorNamingKey) {
  const st::File f = st::deserialize(python_file(), "mem");
  try {
    f.at("missing.weight");
    ADD_FAILURE() << "no StateDictError";
  } catch (const StateDictError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.weight"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, SerializeRejectsBadNames) {
  EXPECT_THROW(st::serialize({{"a", zeros({1})}, {"a", zeros({1})}}), ValueError);
  EXPECT_THROW(st::serialize({{"", zeros({1})}}), ValueError);
  EXPECT_THROW(st::serialize({{"__metadata__", zeros({1})}}), ValueError);
  EXPECT_THROW(st::serialize({{"bad\xff", zeros({1})}}), ValueError);
  EXPECT_THROW(st::serialize({{"a", zeros({1})}}, {{"k", "bad\xc3"}}), ValueError);
  EXPECT_THROW(st::serialize({{"undefined", Tensor()}}), ValueError);
}

TEST(Safetensors, LoadMissingFileThrowsIoError) {
  const std::string path =
      std::string(LOCKSTEP_BINARY_DIR) + "/io_test_tmp/does-not-exist.safetensors";
  try {
    st::load_file(path);
    ADD_FAILURE() << "no IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Safetensors, SaveIntoMissingDirectoryThrowsIoError) {
  EXPECT_THROW(st::save_file({{"a", zeros({1})}},
                             std::string(LOCKSTEP_BINARY_DIR) + "/no/such/dir/x.safetensors"),
               IoError);
}

// ---- malformed files: one test per kind ------------------------------------------------------

TEST(SafetensorsMalformed, TooShortForSizeField) {
  expect_data_error("", {"0 bytes", "8-byte"});
  expect_data_error(std::string("\x02\x00\x00", 3), {"3 bytes"});
}

TEST(SafetensorsMalformed, TruncatedData) {
  const std::string bytes = python_file();
  expect_data_error(bytes.substr(0, bytes.size() - 1),
                    {"tensor 'b'", "beyond the data buffer of 31 bytes"});
}

TEST(SafetensorsMalformed, TruncatedHeader) {
  const std::string bytes = python_file();
  expect_data_error(bytes.substr(0, 100),
                    {"header size 256", "beyond the end of the file", "92 bytes"});
}

TEST(SafetensorsMalformed, HeaderSizeBeyondFile) {
  expect_data_error(with_size_field(1000, "{}"), {"header size 1000", "beyond the end"});
  // A size near 2^64 must not wrap around in the bounds check.
  expect_data_error(with_size_field(~std::uint64_t{0}, "{}"), {"header size 18446744073709551615"});
}

TEST(SafetensorsMalformed, HeaderSizeAboveLimit) {
  expect_data_error(with_size_field(std::uint64_t{1} << 40, "{}"), {"exceeds the limit"});
}

TEST(SafetensorsMalformed, HeaderNotStartingWithBrace) {
  expect_data_error(make_file(" {}"), {"does not start with '{'"});
  expect_data_error(make_file(""), {"does not start with '{'"});
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  expect_data_error(make_file("[1, 2]"), {"does not start with '{'"});
  expect_data_error(make_file("\"text\""), {"does not start with '{'"});
}

TEST(SafetensorsMalformed, NonJsonHeader) {
  expect_data_error(make_file("{not json}"), {"header is not valid JSON"});
  expect_data_error(make_file("{}{}"), {"header is not valid JSON"});
  expect_data_error(make_file(R"({"a":{"dtype":"F32")"), {"header is not valid JSON"});
}

TEST(SafetensorsMalformed, InvalidUtf8InHeader) {
  expect_data_error(make_file("{\"\xff\":{}}"), {"header is not valid JSON"});
}

TEST(SafetensorsMalformed, RepeatedKey) {
  expect_data_error(make_file(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                              R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
                              std::string(4, '\0')),
                    {"repeats the key 'a'"});
  expect_data_error(
      make_file(R"({"a":{"dtype":"F32","dtype":"F64","shape":[],"data_offsets":[0,4]}})",
                std::string(4, '\0')),
      {"repeats the key 'dtype'"});
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  expect_data_error(make_file(R"({"w":[1,2]})"), {"tensor 'w'", "not an object"});
}

TEST(SafetensorsMalformed, MissingDtype) {
  expect_data_error(make_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                    {"tensor 'w'", "missing \"dtype\""});
}

TEST(SafetensorsMalformed, MissingShape) {
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", std::string(4, '\0')),
      {"tensor 'w'", "missing \"shape\""});
}

TEST(SafetensorsMalformed, MissingOffsets) {
  expect_data_error(make_file(R"({"w":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
                    {"tensor 'w'", "missing \"data_offsets\""});
}

TEST(SafetensorsMalformed, DtypeNotAString) {
  expect_data_error(
      make_file(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
      {"tensor 'w'", "\"dtype\" is not a string"});
}

TEST(SafetensorsMalformed, UnsupportedDtypes) {
  for (const std::string dtype :
       {"F16", "BF16", "I32", "I16", "I8", "U8", "U64", "BOOL", "F8_E4M3", "f32", "XYZ"}) {
    expect_data_error(
        make_file(R"({"w":{"dtype":")" + dtype + R"(","shape":[1],"data_offsets":[0,4]}})",
                  std::string(4, '\0')),
        {"tensor 'w'", "dtype '" + dtype + "' is not supported", "F32, F64 and I64"});
  }
}

TEST(SafetensorsMalformed, ShapeNotAnArray) {
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", std::string(4, '\0')),
      {"tensor 'w'", "\"shape\" is not an array"});
}

TEST(SafetensorsMalformed, ShapeEntryNotANonNegativeInteger) {
  for (const std::string dim : {"-1", "1.5", "\"2\"", "null", "18446744073709551615", "1e3"})
    expect_data_error(
        make_file(R"({"w":{"dtype":"F32","shape":[)" + dim + R"(],"data_offsets":[0,4]}})",
                  std::string(4, '\0')),
        {"tensor 'w'", "not an integer in [0, 2^63)"});
}

TEST(SafetensorsMalformed, ShapeWithTooManyDimensions) {
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
                std::string(4, '\0')),
      {"tensor 'w'", "9 dimensions"});
}

TEST(SafetensorsMalformed, ShapeElementCountOverflows) {
  // 2^32 * 2^32 elements: must be refused before any allocation.
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      {"tensor 'w'", "overflow"});
  // 2^62 elements fit in int64 but their bytes do not.
  expect_data_error(
      make_file(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})",
                std::string(8, '\0')),
      {"tensor 'w'", "overflow"});
}

TEST(SafetensorsMalformed, HugeShapeDoesNotAllocate) {
  // 2^40 floats claimed with 4 bytes of data: a numel mismatch, not a 4 TiB allocation.
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,4]}})",
                std::string(4, '\0')),
      {"tensor 'w'", "hold 4 bytes", "needs 4398046511104"});
}

TEST(SafetensorsMalformed, OffsetsNotAPair) {
  for (const std::string off : {"[0]", "[0,4,8]", "4", "[-1,4]", "[0,\"4\"]", "[0.0,4]"})
    expect_data_error(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":)" + off + "}}",
                                std::string(4, '\0')),
                      {"tensor 'w'", "\"data_offsets\" is not a pair"});
}

TEST(SafetensorsMalformed, OffsetsBeginAfterEnd) {
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", std::string(4, '\0')),
      {"tensor 'w'", "[4, 0]", "begin after"});
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(4, '\0')),
      {"tensor 'w'", "[4, 8]", "beyond the data buffer of 4 bytes"});
  expect_data_error(
      make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})",
                std::string(4, '\0')),
      {"tensor 'w'", "beyond the data buffer"});
}

TEST(SafetensorsMalformed, NumelMismatch) {
  expect_data_error(make_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",
                              std::string(12, '\0')),
                    {"tensor 'w'", "hold 12 bytes", "shape [2,2]", "needs 16"});
  expect_data_error(
      make_file(R"({"w":{"dtype":"I64","shape":[],"data_offsets":[0,4]}})", std::string(4, '\0')),
      {"tensor 'w'", "hold 4 bytes", "needs 8"});
}

TEST(SafetensorsMalformed, Overlap) {
  expect_data_error(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              std::string(12, '\0')),
                    {"tensor 'b'", "overlap tensor 'a'", "[0, 8]"});
  // The same range twice.
  expect_data_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                              std::string(4, '\0')),
                    {"overlap"});
}

TEST(SafetensorsMalformed, Hole) {
  expect_data_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                              std::string(12, '\0')),
                    {"bytes [4, 8)", "before tensor 'b'", "hole"});
  expect_data_error(
      make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
      {"bytes [0, 4)", "before tensor 'a'"});
}

TEST(SafetensorsMalformed, TrailingBytes) {
  expect_data_error(
      make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(6, '\0')),
      {"bytes [4, 6)", "end of the data buffer"});
  expect_data_error(make_file("{}", "x"), {"bytes [0, 1)"});
}

TEST(SafetensorsMalformed, MetadataNotAnObject) {
  expect_data_error(make_file(R"({"__metadata__":["format","pt"]})"),
                    {"\"__metadata__\" is not an object"});
}

TEST(SafetensorsMalformed, NonStringMetadata) {
  expect_data_error(make_file(R"({"__metadata__":{"epoch":3}})"),
                    {"\"__metadata__\" entry 'epoch'", "not a string"});
  expect_data_error(make_file(R"({"__metadata__":{"x":{"y":"z"}}})"),
                    {"entry 'x'", "not a string"});
}

// Every prefix and every single-bit flip of a valid file either parses or throws a lockstep
// error (never anything else, never a crash).
TEST(SafetensorsMalformed, TruncationsAndBitFlipsNeverCrash) {
  const std::string good = python_file();
  int parsed = 0, refused = 0;
  auto attempt = [&](const std::string& bytes) {
    try {
      st::deserialize(bytes, "mutant");
      ++parsed;
    } catch (const Error&) {
      ++refused;
    }
  };
  for (std::size_t len = 0; len < good.size(); ++len) attempt(good.substr(0, len));
  for (std::size_t i = 0; i < good.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string m = good;
      m[i] = static_cast<char>(m[i] ^ (1 << bit));
      attempt(m);
    }
  EXPECT_EQ(parsed + refused, static_cast<int>(good.size() * 9));
  EXPECT_GT(refused, static_cast<int>(good.size()));  // every truncation at least
  EXPECT_GT(parsed, 0);                               // flips inside the data are valid files
}
