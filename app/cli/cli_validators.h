// The value checks of the `lockstep` flags: CLI11 validators with our own wording (the flag, what
// was expected, what was given), and the small text helpers the flag definitions share.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::app {

/// "'abc'" — the value as the user typed it, quoted.
std::string single_quoted(const std::string& s);

/// A validator from a predicate on the text; `want` describes a valid value.
CLI::Validator text_check(std::function<bool(const std::string&)> ok, const std::string& want,
                          const std::string& type_name);

/// A validator that runs one of our parsers (which throw lockstep::Error with the full message).
CLI::Validator parser_check(std::function<void(const std::string&)> parse,
                            const std::string& type_name);

CLI::Validator integer_at_least(std::int64_t min);

CLI::Validator any_integer();

CLI::Validator unsigned_integer();

/// A finite number >= 0 (or > 0 with `positive`).
CLI::Validator finite_number(bool positive);

/// --bucket-cap-mb: a finite number > 0 and at most 1048576 (1 TiB of buckets).
CLI::Validator bucket_megabytes();

/// A number in [0, 1).
CLI::Validator fraction();

CLI::Validator one_of(std::vector<std::string> choices);

/// "B1,B2" with both in [0, 1).
bool parse_betas(const std::string& text, double& b1, double& b2);

/// A file or directory name: anything but empty (`--save "$OUT"` with OUT unset must not
/// silently mean "no --save").
CLI::Validator file_name(const std::string& type_name);

/// " (default: VALUE)", the end of every flag's help text.
std::string dflt(const std::string& value);

}  // namespace lockstep::app
