// The benchmarks' `--name=value` command-line options (bench_cnn, bench_gpt, bench_transport).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

namespace lockstep::bench {

/// The value of `--name=value` in argv, or `fallback` when absent.
inline std::string option(int argc, char** argv, const char* name, const std::string& fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  return fallback;
}

/// `--name=N` as an integer (strtol), or `fallback` when absent.
inline long arg(int argc, char** argv, const char* name, long fallback) {
  const std::string v = option(argc, argv, name, "");
  return v.empty() ? fallback : std::strtol(v.c_str(), nullptr, 10);
}

}  // namespace lockstep::bench
