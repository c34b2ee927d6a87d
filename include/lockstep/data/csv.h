// Reader for numeric CSV files: feature columns plus one integer class-label column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lockstep/data/idx.h"  // LabeledData

namespace lockstep::data {

struct CsvOptions {
  /// 0-based column of the integer class label; negative counts from the end (-1 = last).
  std::int64_t label_column = -1;
};

/// Reads a CSV file of numeric features and one integer class label per row:
/// features [N, F] float32 (F = columns - 1, in file order without the label column), labels [N]
/// int64.
///
/// Syntax (every violation is a DataError "FILE:LINE: ..." with the 1-based physical line and,
/// for a bad field, its 1-based column and the header name if any):
/// - Lines end in LF or CRLF; a UTF-8 byte-order mark at the start is skipped. Fields are
///   separated by commas; spaces and tabs around a field are ignored. Quoting is not supported
///   (a quoted number is a non-numeric field).
/// - Numbers: an optional sign ('+' or '-'), decimal digits with an optional '.' and an optional
///   exponent ("1", "-2.5", ".5", "5.", "1e-3") -- what strtod accepts except hexadecimal, inf
///   and nan. Values are parsed as float64 (std::from_chars, correctly rounded) and then rounded
///   to float32, as numpy.loadtxt + torch.tensor(..., dtype=float32) do. Errors: a field that is
///   not entirely a number ("1.5x"), an empty field, nan, inf (any spelling), a value outside
///   float64 range, a feature whose magnitude exceeds the float32 maximum.
/// - The first line is a header when any of its fields is non-empty and not a number (nan/inf
///   spellings count as numbers here, so a first row "nan,1" is a data row and an error). After
///   it, every field must be a number.
/// - Every row has as many fields as the first line ("expected K fields, got M"). At least two
///   columns (one feature and the label) are required.
/// - Labels: an integer value, written "3", "3.0", "3e0" or "-0" (read as 0); fractional ("3.5"),
///   negative or above 2^53 values are errors. The number of classes is not checked here.
/// - Blank (empty or whitespace-only) lines at the end of the file are ignored; a blank line
///   followed by more data is an error at the blank line.
/// - A file with no data rows (empty, only blank lines, or only a header) is an error.
/// - `options.label_column` outside [-K, K) for K columns is an error (line 1).
/// Throws IoError when the file cannot be read.
LabeledData read_csv(const std::string& path, const CsvOptions& options = {});

/// read_csv on the text of a file; `name` (the file path) appears in every error. Throws only
/// DataError.
LabeledData parse_csv(std::string_view text, const std::string& name,
                      const CsvOptions& options = {});

}  // namespace lockstep::data
