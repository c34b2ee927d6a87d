// Numeric CSV reader (features + one integer label column). Syntax: see csv.h.
#include "lockstep/data/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep::data {

namespace {

// The whole file as bytes; IoError naming the path and the system's reason otherwise.
// (Same contract as io::read_file; kept local so the readers do not depend on the io module.)
std::string read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open '" + path + "': " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw IoError("cannot stat '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw IoError("cannot read '" + path + "': is a directory");
  std::string out;
  if (S_ISREG(st.st_mode) && st.st_size > 0) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError("cannot read '" + path + "': " + std::strerror(errno));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

bool is_blank_char(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank_char(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank_char(s.back())) s.remove_suffix(1);
  return s;
}

bool is_blank_line(std::string_view s) {
  for (char c : s)
    if (!is_blank_char(c) && c != '\r') return false;
  return true;
}

// A field for an error message: quoted, non-printable bytes escaped, long fields cut.
std::string quote_field(std::string_view s) {
  std::string out = "'";
  std::size_t n = 0;
  for (char c : s) {
    if (++n > 40) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\'' && c != '\\') {
      out += c;
    } else {
      const char* digits = "0123456789abcdef";
      out += "\\x";
      out += digits[u >> 4];
      out += digits[u & 0xF];
    }
  }
  return out + "'";
}

enum class NumStatus { kOk, kNotNumber, kOutOfRange };

// Parses a whole (trimmed) field as a number: optional '+' or '-', then what std::from_chars
// (chars_format::general) accepts, which includes "inf"/"nan" spellings (the caller rejects
// them). No hexadecimal; nothing may follow the number.
NumStatus parse_number(std::string_view s, double& value) {
  if (s.empty()) return NumStatus::kNotNumber;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  if (*first == '+') {
    ++first;
    if (first == last || *first == '-' || *first == '+') return NumStatus::kNotNumber;
  }
  auto [ptr, ec] = std::from_chars(first, last, value, std::chars_format::general);
  if (ec == std::errc::invalid_argument || ptr != last) return NumStatus::kNotNumber;
  if (ec == std::errc::result_out_of_range) return NumStatus::kOutOfRange;
  return NumStatus::kOk;
}

// Splits one line (without its '\n'; a trailing '\r' is dropped) into trimmed fields.
void split_fields(std::string_view line, std::vector<std::string_view>& fields) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  fields.clear();
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      fields.push_back(trim(line.substr(start)));
      return;
    }
    fields.push_back(trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

}  // namespace

LabeledData parse_csv(std::string_view text, const std::string& name, const CsvOptions& options) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  std::vector<std::string_view> fields;
  std::vector<std::string> header;  // column names when the first line is a header
  std::vector<float> features;
  std::vector<std::int64_t> labels;
  std::size_t ncols = 0;  // fields per row, from the first line
  std::size_t label = 0;  // resolved label column
  std::int64_t line_no = 0;
  std::int64_t blank_line = 0;  // first blank line seen after content (0: none pending)
  bool have_first = false;

  auto where = [&](std::int64_t line) { return name + ":" + std::to_string(line) + ": "; };
  auto column = [&](std::size_t c) {
    std::string s = "column " + std::to_string(c + 1);
    if (!header.empty()) s += " (" + quote_field(header[c]) + ")";
    return s;
  };

  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;

    if (is_blank_line(line)) {
      if (blank_line == 0) blank_line = line_no;
      continue;
    }
    if (blank_line != 0)
      throw DataError(where(blank_line) + "blank line before more data (line " +
                      std::to_string(line_no) +
                      "); blank lines are allowed only at the end of the file");

    split_fields(line, fields);

    if (!have_first) {
      have_first = true;
      ncols = fields.size();
      if (ncols < 2)
        throw DataError(where(line_no) +
                        "expected at least 2 columns (features and a label), "
                        "got " +
                        std::to_string(ncols));
      const auto k = static_cast<std::int64_t>(ncols);
      if (options.label_column < -k || options.label_column >= k)
        throw DataError(where(line_no) + "label column " + std::to_string(options.label_column) +
                        " is out of range for " + std::to_string(ncols) + " columns (valid: " +
                        std::to_string(-k) + " to " + std::to_string(k - 1) + ")");
      label = static_cast<std::size_t>(options.label_column < 0 ? options.label_column + k
                                                                : options.label_column);
      bool is_header = false;
      for (auto f : fields) {
        double v;
        if (!f.empty() && parse_number(f, v) == NumStatus::kNotNumber) is_header = true;
      }
      if (is_header) {
        for (auto f : fields) header.emplace_back(f);
        continue;
      }
    }

    if (fields.size() != ncols)
      throw DataError(where(line_no) + "expected " + std::to_string(ncols) + " fields, got " +
                      std::to_string(fields.size()));

    for (std::size_t c = 0; c < ncols; ++c) {
      std::string_view f = fields[c];
      if (f.empty()) throw DataError(where(line_no) + column(c) + ": empty field");
      double v = 0;
      NumStatus st = parse_number(f, v);
      if (st == NumStatus::kNotNumber)
        throw DataError(where(line_no) + column(c) + ": not a number: " + quote_field(f));
      if (st == NumStatus::kOutOfRange)
        throw DataError(where(line_no) + column(c) + ": " + quote_field(f) +
                        " is out of the float64 range");
      if (std::isnan(v))
        throw DataError(where(line_no) + column(c) + ": NaN value " + quote_field(f) +
                        " (NaN is not allowed)");
      if (std::isinf(v))
        throw DataError(where(line_no) + column(c) + ": infinite value " + quote_field(f) +
                        " (Inf is not allowed)");
      if (c == label) {
        if (v < 0)
          throw DataError(where(line_no) + column(c) + ": negative label " + quote_field(f) +
                          " (class labels are integers >= 0)");
        if (v != std::floor(v))
          throw DataError(where(line_no) + column(c) + ": fractional label " + quote_field(f) +
                          " (class labels are integers >= 0)");
        if (v > 9007199254740992.0)  // 2^53: the largest range where doubles are exact
          throw DataError(where(line_no) + column(c) + ": label " + quote_field(f) +
                          " is too large (at most 2^53)");
        labels.push_back(static_cast<std::int64_t>(v));
      } else {
        // 2^128 - 2^103: the smallest magnitude that rounds to infinity in float32.
        if (std::fabs(v) >= 0x1.ffffffp+127)
          throw DataError(where(line_no) + column(c) + ": " + quote_field(f) +
                          " is out of the float32 range (|x| <= 3.4028235e38)");
        features.push_back(static_cast<float>(v));
      }
    }
  }

  if (!have_first) throw DataError(name + ": empty file (no rows)");
  if (labels.empty())
    throw DataError(name + ": no data rows (only a header line: " + std::to_string(ncols) +
                    " columns)");

  const auto n = static_cast<std::int64_t>(labels.size());
  const auto f = static_cast<std::int64_t>(ncols - 1);
  LabeledData r;
  r.features = empty({n, f}, kFloat32);
  std::memcpy(r.features.data_ptr<float>(), features.data(), features.size() * sizeof(float));
  r.labels = empty({n}, kInt64);
  std::memcpy(r.labels.data_ptr<std::int64_t>(), labels.data(),
              labels.size() * sizeof(std::int64_t));
  return r;
}

LabeledData read_csv(const std::string& path, const CsvOptions& options) {
  return parse_csv(read_whole_file(path), path, options);
}

}  // namespace lockstep::data
