// Wording shared by the CLI's messages (see message_text.h).
#include "cli/message_text.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <regex>

namespace lockstep::app {

std::string typed_number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

std::string typed_flag(const std::string& line) {
  const auto eq = line.find('=');
  if (eq == std::string::npos) return line;
  std::string out = line.substr(0, eq + 1);
  const std::string value = line.substr(eq + 1);
  std::size_t pos = 0;
  while (pos <= value.size()) {
    std::size_t comma = value.find(',', pos);
    if (comma == std::string::npos) comma = value.size();
    const std::string piece = value.substr(pos, comma - pos);
    char* end = nullptr;
    const double v = std::strtod(piece.c_str(), &end);
    const bool number = !piece.empty() && end == piece.c_str() + piece.size() &&
                        piece.find_first_of("0123456789") != std::string::npos;
    out += number ? typed_number(v) : piece;
    if (comma < value.size()) out += ',';
    pos = comma + 1;
  }
  return out;
}

std::string human_bytes(long double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  int u = 0;
  while (bytes >= 1024.0L && u < 8) bytes /= 1024.0L, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0Lf %s" : "%.1Lf %s", bytes, units[u]);
  return buf;
}

std::string user_facing(const std::string& message) {
  static const std::regex internal(
      R"(load_state_dict into [A-Za-z0-9_]+: ?|DataParallel replica on [a-z]+:[0-9]+: )");
  static const std::regex bad_alloc(R"(^std::bad_alloc$)");  // what() of a failed allocation
  // A library function's name leading the message (load_mnist_dir:, init_mpi:, read_file:).
  static const std::regex function(R"(^[a-z]+(?:_[a-z0-9]+)+: )");
  return std::regex_replace(
      std::regex_replace(std::regex_replace(message, internal, ""), bad_alloc, "out of memory"),
      function, "", std::regex_constants::format_first_only);
}

}  // namespace lockstep::app
