// End-to-end tests of `lockstep train --data` with real files: IDX (raw and gzipped, as the
// Fashion-MNIST directory layout) and CSV, and one test per kind of bad input (issue 4, "Bad
// input"): exit status 2, exactly one `lockstep: error:` line naming the file (and the line for
// CSV), and no output file created. Fixtures are tiny files written by the tests.
#include <cstdint>
#include <regex>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::e2e {
namespace {

/// gzip -c `path` > `path`.gz (the system's gzip).
std::string gzip(const std::string& path) {
  RunResult r = run("/bin/gzip", {"-k", "-f", "-n", path});
  EXPECT_EQ(r.status, 0) << r.err;
  return path + ".gz";
}

/// Runs `lockstep train` with `args` plus --save/--metrics/--checkpoint-dir in `dir`, expects a
/// data error naming every string of `mentions`, and that no output file was created.
void expect_bad_input(const TempDir& dir, const std::vector<std::string>& args,
                      const std::vector<std::string>& mentions) {
  const std::vector<std::string> outputs{"--save",           dir / "out.safetensors",
                                         "--metrics",        dir / "m.jsonl",
                                         "--checkpoint-dir", dir / "ck",
                                         "--epochs",         "1"};
  expect_error(std::vector<std::string>{"train"} + args + outputs, mentions);
  EXPECT_FALSE(fs::exists(dir / "out.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "m.jsonl"));
  EXPECT_FALSE(fs::exists(dir / "ck"));
}

// ---- good files --------------------------------------------------------------------------

TEST(CliData, FashionMnistDirectoryLayoutGzipped) {
  TempDir dir;
  write_text(dir / "train-images-idx3-ubyte", idx_images(40, 3, 4));
  write_text(dir / "train-labels-idx1-ubyte", idx_labels(cyclic_labels(40, 10)));
  write_text(dir / "t10k-images-idx3-ubyte", idx_images(12, 3, 4));
  write_text(dir / "t10k-labels-idx1-ubyte", idx_labels(cyclic_labels(12, 10)));
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    gzip(dir / f);
    fs::remove(dir / f);
  }
  RunResult r =
      lockstep({"train", "--data", "fashion-mnist:" + dir.path().string(), "--epochs", "2",
                "--batch-size", "8", "--model", "mlp:12,16,10", "--save", dir / "w"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 3u) << r.out;
  // The default model for non-synthetic data is mlp:IN,256,C.
  auto w = safetensors::load_file(dir / "w");
  EXPECT_EQ(w.at("0.weight").shape(), Shape({16, 12}));
  RunResult d = lockstep({"train", "--data", "fashion-mnist:" + dir.path().string(), "--epochs",
                          "1", "--save", dir / "d"});
  ASSERT_EQ(d.status, 0) << d.err;
  EXPECT_EQ(safetensors::load_file(dir / "d").at("0.weight").shape(), Shape({256, 12}));
  // eval validates on the t10k files: 12 rows.
  RunResult e = lockstep({"eval", "--data", "fashion-mnist:" + dir.path().string(), "--model",
                          "mlp:12,16,10", "--weights", dir / "w"});
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(
      std::regex_match(e.out, std::regex(R"(loss \d+\.\d{6} accuracy \d\.\d{6} samples 12\n)")))
      << e.out;
}

TEST(CliData, IdxFilesRawAndHeldOutValidation) {
  TempDir dir;
  write_text(dir / "ti", idx_images(30, 2, 2));
  write_text(dir / "tl", idx_labels(cyclic_labels(30, 3)));
  RunResult r = lockstep({"train", "--data", "idx:" + (dir / "ti") + "," + (dir / "tl"), "--epochs",
                          "1", "--val-fraction", "0.5", "--metrics", dir / "m"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(lines_of(r.out).at(0).find("val_acc 0."), std::string::npos) << r.out;
}

TEST(CliData, CsvWithHeaderCrlfAndLabelColumn) {
  TempDir dir;
  std::string text = "label,a,b\r\n";
  for (int i = 0; i < 20; ++i)
    text += std::to_string(i % 3) + "," + std::to_string(i * 0.5) + "," + std::to_string(-i) +
            ".25\r\n";
  write_text(dir / "d.csv", text + "\r\n\r\n");
  RunResult r = lockstep({"train", "--data", "csv:" + (dir / "d.csv"), "--label-column", "0",
                          "--model", "mlp:2,4,3", "--epochs", "2", "--quiet"});
  ASSERT_EQ(r.status, 0) << r.err;
  // The last column as label: -19.25 is not a valid label.
  expect_error({"train", "--data", "csv:" + (dir / "d.csv"), "--epochs", "1"}, {dir / "d.csv"});
  // A validation file with another feature count.
  write_text(dir / "v.csv", "1,2,3,0\n");
  expect_error(
      {"train", "--data", "csv:" + (dir / "d.csv") + "," + (dir / "v.csv"), "--label-column", "0"},
      {dir / "v.csv"});
}

// ---- bad input, one test per kind ----------------------------------------------------------

TEST(CliBadInput, MissingFile) {
  TempDir dir;
  expect_bad_input(dir, {"--data", "csv:" + (dir / "nope.csv")}, {dir / "nope.csv"});
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti") + "," + (dir / "tl")}, {dir / "ti"});
  expect_bad_input(dir, {"--data", "fashion-mnist:" + (dir / "nodir")}, {dir / "nodir"});
}

TEST(CliBadInput, WrongIdxMagic) {
  TempDir dir;
  write_text(dir / "ti", idx_labels({1, 2, 3}));  // a labels file where images belong
  write_text(dir / "tl", idx_labels({1, 2, 3}));
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti") + "," + (dir / "tl")}, {dir / "ti"});
}

TEST(CliBadInput, WrongIdxDimensions) {
  TempDir dir;
  write_text(dir / "ti", be32(0x00000802) + be32(3) + be32(4) + std::string(12, '\0'));
  write_text(dir / "tl", idx_labels({1, 2, 3}));
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti") + "," + (dir / "tl")}, {dir / "ti"});
}

TEST(CliBadInput, TruncatedIdx) {
  TempDir dir;
  const std::string images = idx_images(3, 2, 2);
  write_text(dir / "ti", images.substr(0, images.size() - 3));
  write_text(dir / "tl", idx_labels({1, 2, 3}));
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti") + "," + (dir / "tl")}, {dir / "ti"});
}

TEST(CliBadInput, TruncatedGzip) {
  TempDir dir;
  write_text(dir / "ti", idx_images(50, 4, 4));
  const std::string gz = read_text(gzip(dir / "ti"));
  write_text(dir / "ti.gz", gz.substr(0, gz.size() / 2));
  write_text(dir / "tl", idx_labels(cyclic_labels(50, 2)));
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti.gz") + "," + (dir / "tl")}, {dir / "ti.gz"});
}

TEST(CliBadInput, CorruptGzip) {
  TempDir dir;
  write_text(dir / "ti", idx_images(50, 4, 4));
  std::string gz = read_text(gzip(dir / "ti"));
  for (std::size_t i = 12; i < gz.size() - 8; i += 5) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  write_text(dir / "ti.gz", gz);
  write_text(dir / "tl", idx_labels(cyclic_labels(50, 2)));
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti.gz") + "," + (dir / "tl")}, {dir / "ti.gz"});
}

TEST(CliBadInput, ImageLabelCountMismatch) {
  TempDir dir;
  write_text(dir / "ti", idx_images(3, 2, 2));
  write_text(dir / "tl", idx_labels({1, 2}));
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti") + "," + (dir / "tl")},
                   {dir / "ti", dir / "tl"});
}

/// Writes `text` as dir/name and expects a data error naming it and `line` (file:line:).
void expect_bad_csv(const TempDir& dir, const std::string& name, const std::string& text, int line,
                    const std::vector<std::string>& extra = {}) {
  SCOPED_TRACE(name);
  write_text(dir / name, text);
  std::vector<std::string> mentions{dir / name};
  if (line > 0) mentions.push_back(dir / name + ":" + std::to_string(line) + ":");
  expect_bad_input(dir, std::vector<std::string>{"--data", "csv:" + (dir / name)} + extra,
                   mentions);
}

TEST(CliBadInput, RaggedCsvRow) {
  TempDir dir;
  expect_bad_csv(dir, "ragged.csv", "1,2,0\n3,4,1\n5,1\n", 3);
}

TEST(CliBadInput, NonNumericNanOrInfValue) {
  TempDir dir;
  expect_bad_csv(dir, "text.csv", "a,b,label\n1,2,0\n1,x,1\n", 3);
  expect_bad_csv(dir, "nan.csv", "1,nan,0\n", 1);
  expect_bad_csv(dir, "inf.csv", "1,2,0\n-inf,2,1\n", 2);
  expect_bad_csv(dir, "empty_field.csv", "1,,0\n", 1);
}

TEST(CliBadInput, EmptyFile) {
  TempDir dir;
  expect_bad_csv(dir, "empty.csv", "", 0);
  expect_bad_csv(dir, "header_only.csv", "a,b,label\n", 0);
  write_text(dir / "ti", "");
  write_text(dir / "tl", idx_labels({1}));
  expect_bad_input(dir, {"--data", "idx:" + (dir / "ti") + "," + (dir / "tl")}, {dir / "ti"});
}

TEST(CliBadInput, NegativeFractionalOrOutOfRangeLabel) {
  TempDir dir;
  expect_bad_csv(dir, "negative.csv", "1,2,0\n1,2,-1\n", 2);
  expect_bad_csv(dir, "fractional.csv", "1,2,0\n1,2,0.5\n", 2);
  expect_bad_csv(dir, "huge.csv", "1,2,0\n1,2,1e30\n", 2);
  // A label beyond the classes the model outputs.
  write_text(dir / "seven.csv", "1,2,0\n1,2,1\n1,2,7\n");
  expect_bad_input(dir, {"--data", "csv:" + (dir / "seven.csv"), "--model", "mlp:2,4,2"},
                   {dir / "seven.csv", "output width 2", "8 classes"});
}

TEST(CliBadInput, ModelWidthDoesNotMatchTheData) {
  TempDir dir;
  write_text(dir / "d.csv", "1,2,0\n1,2,1\n");
  expect_bad_input(dir, {"--data", "csv:" + (dir / "d.csv"), "--model", "mlp:3,4,2"},
                   {dir / "d.csv", "mlp:3,4,2", "input width 3", "2 features"});
}

TEST(CliBadInput, UnknownFlagOrDevice) {
  TempDir dir;
  expect_bad_input(dir, {"--no-such-flag"}, {"--no-such-flag"});
  expect_bad_input(dir, {"--devices", "tpu:0"}, {"tpu:0"});
}

TEST(CliBadInput, InitUnreadableOrNotMatchingTheModel) {
  TempDir dir;
  expect_bad_input(dir, {"--init", dir / "missing.safetensors"}, {"--init", "missing.safetensors"});
  write_text(dir / "garbage.safetensors", "not a safetensors file at all");
  expect_bad_input(dir, {"--init", dir / "garbage.safetensors"}, {"--init", "garbage.safetensors"});
  // Names: a model with dropout has its second Linear at index 3, not 2.
  ASSERT_EQ(
      lockstep({"train", "--epochs", "1", "--dropout", "0.5", "--save", dir / "names"}).status, 0);
  expect_bad_input(dir, {"--init", dir / "names"}, {"--init", dir / "names", "2.weight"});
  // Shapes: a hidden layer of 6 instead of 5.
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--model", "mlp:10,6,2", "--save", dir / "shapes"})
                .status,
            0);
  expect_bad_input(dir, {"--init", dir / "shapes"}, {"--init", dir / "shapes", "0.weight"});
  // eval reports the same way.
  expect_error({"eval", "--weights", dir / "shapes"}, {"--weights", dir / "shapes"});
  expect_error({"eval", "--weights", dir / "missing.safetensors"}, {"missing.safetensors"});
}

}  // namespace
}  // namespace lockstep::e2e
