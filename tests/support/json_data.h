// Small PyTorch-made test data in JSON (tests/data/<dir>/*.json, each beside the script that
// wrote it): the parsed file, and {"shape": [...], "data": [...]} entries as tensors.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/golden.h"

namespace lockstep::testing {

/// tests/data/<relative_path> parsed; lockstep::Error naming the path when it cannot be opened.
inline nlohmann::json read_json_data(const std::string& relative_path) {
  const std::string path = test_data_path(relative_path);
  std::ifstream in(path);
  if (!in) throw Error("cannot open golden file " + path);
  return nlohmann::json::parse(in);
}

/// {"shape", "data"} as a tensor of `dtype` (the values are exact doubles of the file's dtype);
/// an undefined tensor for null.
inline Tensor json_tensor(const nlohmann::json& e, DType dtype) {
  if (e.is_null()) return Tensor();
  const Shape shape(e.at("shape").get<std::vector<std::int64_t>>());
  const auto data = e.at("data").get<std::vector<double>>();
  return tensor(std::span<const double>(data), shape).to(dtype);
}

}  // namespace lockstep::testing
