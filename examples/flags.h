// The examples' command lines (not part of the library): `--name value` flags and bare `--name`
// switches, so that each example's main() shows training rather than argument parsing.
//   Flags flags{"cnn", "usage: cnn [--epochs N] [--deterministic]", {{"--epochs", "3"}},
//               {"--deterministic"}};
//   flags.parse(argc, argv, 1);
//   const int epochs = flags.positive("--epochs");
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

namespace examples {

struct Flags {
  std::string program;                        // names the program in errors
  std::string usage;                          // printed for a command line that does not parse
  std::map<std::string, std::string> values;  // each flag's default, then its value
  std::set<std::string> switches;             // the switches there are
  std::set<std::string> on = {};              // the switches given

  /// Reads argv[first ...]: a name of `values` followed by a value, or a name of `switches`.
  /// Anything else (an unknown name, a flag without its value) prints `usage` and exits with
  /// status 2.
  void parse(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      const std::string arg = argv[i];
      if (values.count(arg) && i + 1 < argc) {
        values[arg] = argv[++i];
      } else if (switches.count(arg)) {
        on.insert(arg);
      } else {
        std::fprintf(stderr, "%s\n", usage.c_str());
        std::exit(2);
      }
    }
  }

  /// The value of `name` as an integer in [1, 10^6]; otherwise prints "PROGRAM: NAME takes an
  /// integer from 1 to 1000000, got 'VALUE'" and exits with status 2.
  int positive(const std::string& name) const {
    const std::string& text = values.at(name);
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (!text.empty() && *end == '\0' && v >= 1 && v <= 1000000) return static_cast<int>(v);
    std::fprintf(stderr, "%s: %s takes an integer from 1 to 1000000, got '%s'\n", program.c_str(),
                 name.c_str(), text.c_str());
    std::exit(2);
  }
};

}  // namespace examples
