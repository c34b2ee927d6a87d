// CSV reader: accepted syntax (header detection, CRLF, trailing blank lines, label columns,
// number forms) and one test per kind of bad input, each checking the file:line and column.
#include "lockstep/data/csv.h"

#include <gtest/gtest.h>
#include <unistd.h>

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
using namespace lockstep::data;

std::vector<float> features(const LabeledData& d) { return d.features.to_vector<float>(); }
std::vector<std::int64_t> labels(const LabeledData& d) {
  return d.labels.to_vector<std::int64_t>();
}

// parse_csv(text, "f.csv", {label_column}) must throw DataError whose message contains `parts`.
void expect_data_error(const std::string& text, const std::vector<std::string>& parts,
                       std::int64_t label_column = -1) {
  SCOPED_TRACE("csv text: " + text);
  lockstep::testing::expect_error<DataError>(
      [&] { parse_csv(text, "f.csv", CsvOptions{label_column}); }, parts);
}

TEST(Csv, HeaderAndLastColumnLabel) {
  LabeledData d = parse_csv("x1,x2,y\n1.5,-2,3\n0.25,4e2,0\n", "f.csv");
  ASSERT_EQ(d.features.dtype(), lockstep::kFloat32);
  ASSERT_EQ(d.labels.dtype(), lockstep::kInt64);
  EXPECT_EQ(d.features.sizes(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(features(d), (std::vector<float>{1.5f, -2.0f, 0.25f, 400.0f}));
  EXPECT_EQ(labels(d), (std::vector<std::int64_t>{3, 0}));
}

TEST(Csv, HeaderDetection) {
  // All-numeric first line: a data row.
  EXPECT_EQ(parse_csv("1,2,3\n4,5,6\n", "f.csv").labels.numel(), 2);
  // One non-numeric field makes it a header.
  EXPECT_EQ(parse_csv("1,2,label\n4,5,6\n", "f.csv").labels.numel(), 1);
  EXPECT_EQ(parse_csv("a,b,c\n4,5,6\n", "f.csv").labels.numel(), 1);
  // An empty field does not make a header: the first line is data and the empty field an error.
  expect_data_error("1,,3\n4,5,6\n", {"f.csv:1:", "column 2", "empty field"});
  // nan/inf spellings count as numbers: the first line is data and the NaN an error.
  expect_data_error("nan,1,2\n4,5,6\n", {"f.csv:1:", "column 1", "NaN"});
}

TEST(Csv, LabelColumnFirstLastAndSecondToLast) {
  const std::string text = "10,11,12\n20,21,22\n";
  LabeledData first = parse_csv(text, "f.csv", CsvOptions{0});
  EXPECT_EQ(labels(first), (std::vector<std::int64_t>{10, 20}));
  EXPECT_EQ(features(first), (std::vector<float>{11, 12, 21, 22}));
  LabeledData last = parse_csv(text, "f.csv", CsvOptions{-1});
  EXPECT_EQ(labels(last), (std::vector<std::int64_t>{12, 22}));
  EXPECT_EQ(features(last), (std::vector<float>{10, 11, 20, 21}));
  LabeledData middle = parse_csv(text, "f.csv", CsvOptions{-2});
  EXPECT_EQ(labels(middle), (std::vector<std::int64_t>{11, 21}));
  EXPECT_EQ(features(middle), (std::vector<float>{10, 12, 20, 22}));
  EXPECT_EQ(labels(parse_csv(text, "f.csv", CsvOptions{1})), labels(middle));
  EXPECT_EQ(labels(parse_csv(text, "f.csv", CsvOptions{-3})), labels(first));
}

TEST(Csv, LabelColumnOutOfRange) {
  expect_data_error("1,2,3\n", {"f.csv:1:", "label column 3", "3 columns", "-3 to 2"}, 3);
  expect_data_error("1,2,3\n", {"f.csv:1:", "label column -4", "3 columns"}, -4);
}

TEST(Csv, OnlyALabelColumnIsAnError) {
  expect_data_error("y\n1\n2\n", {"f.csv:1:", "at least 2 columns", "got 1"});
}

TEST(Csv, CrlfAccepted) {
  LabeledData d = parse_csv("a,b\r\n1,2\r\n3.5,4\r\n", "f.csv");
  EXPECT_EQ(features(d), (std::vector<float>{1, 3.5f}));
  EXPECT_EQ(labels(d), (std::vector<std::int64_t>{2, 4}));
  // Line numbers stay physical lines with CRLF.
  expect_data_error("a,b\r\n1,2\r\n3,x\r\n", {"f.csv:3:", "column 2", "'x'"});
}

TEST(Csv, TrailingBlankLinesAccepted) {
  LabeledData d = parse_csv("1,2\n3,4\n\n  \n\r\n\n", "f.csv");
  EXPECT_EQ(labels(d), (std::vector<std::int64_t>{2, 4}));
  // No final newline is fine too.
  EXPECT_EQ(labels(parse_csv("1,2\n3,4", "f.csv")), (std::vector<std::int64_t>{2, 4}));
}

TEST(Csv, BlankLineInTheMiddleIsAnError) {
  expect_data_error("1,2\n\n3,4\n", {"f.csv:2:", "blank line", "line 3"});
  expect_data_error("\n1,2\n", {"f.csv:1:", "blank line"});
}

TEST(Csv, RaggedRow) {
  expect_data_error("a,b,c\n1,2,3\n1,2\n", {"f.csv:3: expected 3 fields, got 2"});
  expect_data_error("1,2,3\n1,2,3,4\n", {"f.csv:2: expected 3 fields, got 4"});
}

TEST(Csv, NonNumericAfterHeader) {
  expect_data_error("x1,x2,y\n1,2,3\n1,abc,3\n",
                    {"f.csv:3:", "column 2 ('x2')", "not a number", "'abc'"});
  // A second header-like line, and a quoted number (quoting is not supported).
  expect_data_error("a,b\nc,d\n", {"f.csv:2:", "column 1"});
  expect_data_error("a,b\n\"1\",2\n", {"f.csv:2:", "column 1", "not a number"});
}

TEST(Csv, PartialNumberIsAnError) {
  expect_data_error("1.5x,2\n", {"f.csv", "no data rows"});  // a header line, then nothing
  expect_data_error("1,2\n1.5x,2\n", {"f.csv:2:", "column 1", "'1.5x'"});
  expect_data_error("1,2\n1,2 3\n", {"f.csv:2:", "column 2", "'2 3'"});
  expect_data_error("1,2\n+-1,2\n", {"f.csv:2:", "column 1", "not a number"});
  expect_data_error("1,2\n0x10,2\n", {"f.csv:2:", "column 1", "not a number"});  // no hex
}

TEST(Csv, NanIsAnError) {
  for (std::string v : {"nan", "NaN", "-nan", "NAN"})
    expect_data_error("a,b\n1,2\n" + v + ",1\n", {"f.csv:3:", "column 1 ('a')", "NaN"});
}

TEST(Csv, InfIsAnError) {
  for (std::string v : {"inf", "-inf", "Infinity", "+inf"})
    expect_data_error("1,2\n" + v + ",1\n", {"f.csv:2:", "column 1", "infinite"});
  // Inf in the label column too.
  expect_data_error("1,2\n1,inf\n", {"f.csv:2:", "column 2", "infinite"});
}

TEST(Csv, OutOfRangeValuesAreErrors) {
  expect_data_error("1,2\n1e999,1\n", {"f.csv:2:", "column 1", "float64 range"});
  expect_data_error("1,2\n1e39,1\n", {"f.csv:2:", "column 1", "float32 range"});
  // Within float32 after rounding / underflowing: accepted.
  LabeledData d = parse_csv("3.4028234e38,1\n1e-50,1\n", "f.csv");
  EXPECT_EQ(features(d)[0], 3.4028234e38f);
  EXPECT_EQ(features(d)[1], 0.0f);
}

TEST(Csv, EmptyFieldIsAnError) {
  expect_data_error("a,b,c\n1,,3\n", {"f.csv:2:", "column 2 ('b')", "empty field"});
  expect_data_error("1,2,3\n1,2,\n", {"f.csv:2:", "column 3", "empty field"});
  expect_data_error("1,2,3\n1, \t,3\n", {"f.csv:2:", "column 2", "empty field"});
}

TEST(Csv, EmptyFileIsAnError) {
  expect_data_error("", {"f.csv", "empty file"});
  expect_data_error("\n\n \r\n", {"f.csv", "empty file"});
}

TEST(Csv, HeaderOnlyIsAnError) {
  expect_data_error("a,b,c\n", {"f.csv", "no data rows"});
  expect_data_error("a,b,c\r\n\r\n", {"f.csv", "no data rows"});
}

TEST(Csv, IntegerValuedLabels) {
  LabeledData d = parse_csv("0,3\n0,3.0\n0,3e0\n0,-0\n0, 7 \n0,+2\n", "f.csv");
  EXPECT_EQ(labels(d), (std::vector<std::int64_t>{3, 3, 3, 0, 7, 2}));
  EXPECT_EQ(labels(parse_csv("0,9007199254740992\n", "f.csv")),
            (std::vector<std::int64_t>{9007199254740992}));
  expect_data_error("0,9007199254740994\n", {"f.csv:1:", "too large"});
}

TEST(Csv, FractionalLabelIsAnError) {
  expect_data_error("a,y\n1,2\n1,3.5\n",
                    {"f.csv:3:", "column 2 ('y')", "fractional label", "'3.5'"});
  expect_data_error("1,2\n1,1e-3\n", {"f.csv:2:", "fractional"});
}

TEST(Csv, NegativeLabelIsAnError) {
  expect_data_error("1,2\n1,-1\n", {"f.csv:2:", "column 2", "negative label", "'-1'"});
  expect_data_error("-3,2\n", {"f.csv:1:", "column 1", "negative"}, 0);
}

TEST(Csv, NumberForms) {
  // Leading '+', '.5', '5.', exponents, spaces and tabs around fields; a BOM at the start.
  LabeledData d = parse_csv("\xEF\xBB\xBF+1.5, .5 ,5.,\t-1E-2\t,0\n", "f.csv");
  EXPECT_EQ(features(d), (std::vector<float>{1.5f, 0.5f, 5.0f, -0.01f}));
  // A BOM does not turn a numeric first line into a header.
  EXPECT_EQ(d.labels.numel(), 1);
}

TEST(Csv, ValuesAreParsedAsDoubleThenRoundedToFloat) {
  // 1 + 2^-24 + 1e-30 lies just above the midpoint of the floats 1 and 1 + 2^-23: parsed
  // directly as float it would round up, but its nearest double is the midpoint itself, which
  // rounds (ties to even) to 1.0f, as numpy.loadtxt (float64) + torch.tensor(dtype=float32) do.
  LabeledData d = parse_csv("1.000000059604644775390625000001,0.1,0\n", "f.csv");
  EXPECT_EQ(features(d), (std::vector<float>{1.0f, 0.1f}));
}

TEST(Csv, ReadCsvFileAndMissingFile) {
  fs::path dir = fs::path(::testing::TempDir()) / ("lockstep_csv_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string p = (dir / "train.csv").string();
  std::ofstream(p) << "a,b,label\n1,2,0\n3,4,1\n5,6,2\n";
  LabeledData d = read_csv(p);
  EXPECT_EQ(d.features.sizes(), (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(labels(d), (std::vector<std::int64_t>{0, 1, 2}));
  // Errors name the real path.
  std::string bad = (dir / "bad.csv").string();
  std::ofstream(bad) << "1,2\n1,x\n";
  try {
    read_csv(bad);
    ADD_FAILURE() << "no exception";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":2:"), std::string::npos) << e.what();
  }
  std::string missing = (dir / "missing.csv").string();
  try {
    read_csv(missing);
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_csv(dir.string()), IoError);  // a directory
  fs::remove_all(dir);
}

}  // namespace
