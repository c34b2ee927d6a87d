// tests/data/torch_rng/torch_rng.json (written by tests/data/torch_rng/generate.py from PyTorch)
// and the same encodings of Lockstep tensors, so that tests compare bits: float32 and float64 as
// hex bit patterns, int64 as integers, whole tensors as FNV-1a 64 hashes of their bytes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "support/golden.h"

namespace lockstep::testing {

inline const nlohmann::json& torch_rng() {
  static const nlohmann::json doc = [] {
    std::ifstream in(test_data_path("torch_rng/torch_rng.json"));
    return nlohmann::json::parse(in);
  }();
  return doc;
}

/// The values of a CPU tensor as generate.py writes them.
inline nlohmann::json torch_values(const Tensor& t) {
  nlohmann::json out = nlohmann::json::array();
  Tensor c = t.to(cpu());
  char buf[32];
  for (std::int64_t i = 0; i < c.numel(); ++i) {
    if (c.dtype() == DType::Float32) {
      std::uint32_t u;
      std::memcpy(&u, c.data_ptr<float>() + i, 4);
      std::snprintf(buf, sizeof buf, "%08x", u);
      out.push_back(buf);
    } else if (c.dtype() == DType::Float64) {
      std::uint64_t u;
      std::memcpy(&u, c.data_ptr<double>() + i, 8);
      std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(u));
      out.push_back(buf);
    } else {
      out.push_back(c.data_ptr<std::int64_t>()[i]);
    }
  }
  return out;
}

/// FNV-1a 64 of the tensor's little-endian bytes, as 16 hex digits.
inline std::string torch_fnv1a64(const Tensor& t) {
  Tensor c = t.to(cpu());
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  const std::size_t n = static_cast<std::size_t>(c.numel()) * (c.dtype() == DType::Float32 ? 4 : 8);
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

/// A test whose default generator is PyTorch's (MT19937) while it runs; the previous generator
/// (engine, seed and position) is restored afterwards.
class TorchStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = default_generator();
    default_generator().set_engine(Generator::Engine::MT19937);
  }
  void TearDown() override { default_generator() = saved_; }

 private:
  Generator saved_;
};

inline DType torch_dtype(const std::string& name) {
  if (name == "float32") return DType::Float32;
  if (name == "float64") return DType::Float64;
  return DType::Int64;
}

}  // namespace lockstep::testing
