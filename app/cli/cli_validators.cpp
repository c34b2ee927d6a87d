// The value checks of the `lockstep` flags (see cli_validators.h).
#include "cli/cli_validators.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>

#include "lockstep/lockstep.h"

namespace lockstep::app {
namespace {

/// Parses all of `text` as a T with std::from_chars (decimal, no leading '+' or spaces); false
/// when any character is left over or the value overflows.
template <class T>
bool parse_all(const std::string& text, T& value) {
  const char* first = text.data();
  const char* last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  return ec == std::errc() && ptr == last && !text.empty();
}

}  // namespace

std::string single_quoted(const std::string& s) { return "'" + s + "'"; }

CLI::Validator text_check(std::function<bool(const std::string&)> ok, const std::string& want,
                          const std::string& type_name) {
  return CLI::Validator(
      [ok, want](std::string& text) -> std::string {
        return ok(text) ? "" : "expected " + want + ", got " + single_quoted(text);
      },
      "", type_name);
}

CLI::Validator parser_check(std::function<void(const std::string&)> parse,
                            const std::string& type_name) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "", type_name);
}

CLI::Validator integer_at_least(std::int64_t min) {
  return text_check(
      [min](const std::string& t) {
        std::int64_t v = 0;
        return parse_all(t, v) && v >= min;
      },
      "an integer >= " + std::to_string(min), "INT>=" + std::to_string(min));
}

CLI::Validator any_integer() {
  return text_check(
      [](const std::string& t) {
        std::int64_t v = 0;
        return parse_all(t, v);
      },
      "an integer", "INT");
}

CLI::Validator unsigned_integer() {
  return text_check(
      [](const std::string& t) {
        std::uint64_t v = 0;
        return parse_all(t, v);
      },
      "an integer in [0, 2^64 - 1]", "UINT64");
}

CLI::Validator finite_number(bool positive) {
  return text_check(
      [positive](const std::string& t) {
        double v = 0.0;
        return parse_all(t, v) && std::isfinite(v) && (positive ? v > 0.0 : v >= 0.0);
      },
      positive ? "a finite number > 0" : "a finite number >= 0", positive ? "FLOAT>0" : "FLOAT>=0");
}

CLI::Validator bucket_megabytes() {
  return text_check(
      [](const std::string& t) {
        double v = 0.0;
        return parse_all(t, v) && std::isfinite(v) && v > 0.0 && v <= 1048576.0;
      },
      "a number of megabytes > 0 and <= 1048576", "MB>0");
}

CLI::Validator fraction() {
  return text_check(
      [](const std::string& t) {
        double v = 0.0;
        return parse_all(t, v) && v >= 0.0 && v < 1.0;
      },
      "a number in [0, 1)", "[0,1)");
}

CLI::Validator one_of(std::vector<std::string> choices) {
  std::string want;
  for (std::size_t i = 0; i < choices.size(); ++i)
    want += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return text_check(
      [choices](const std::string& t) {
        return std::find(choices.begin(), choices.end(), t) != choices.end();
      },
      want, "CHOICE");
}

bool parse_betas(const std::string& text, double& b1, double& b2) {
  const auto comma = text.find(',');
  if (comma == std::string::npos) return false;
  return parse_all(text.substr(0, comma), b1) && parse_all(text.substr(comma + 1), b2) &&
         b1 >= 0.0 && b1 < 1.0 && b2 >= 0.0 && b2 < 1.0;
}

CLI::Validator file_name(const std::string& type_name) {
  return text_check([](const std::string& t) { return !t.empty(); },
                    "a " + std::string(type_name == "DIR" ? "directory" : "file") + " name",
                    type_name);
}

std::string dflt(const std::string& value) { return " (default: " + value + ")"; }

}  // namespace lockstep::app
