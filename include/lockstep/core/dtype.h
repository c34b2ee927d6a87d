// Element types. float32 is the training dtype; float64 serves reference kernels and gradient
// checks; int64 holds class labels and indices (as torch.long).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

enum class DType : std::uint8_t { Float32, Float64, Int64 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;

/// Size of one element in bytes.
constexpr std::size_t element_size(DType t) { return t == DType::Float32 ? 4 : 8; }

/// PyTorch's spelling: "float32", "float64", "int64".
std::string to_string(DType t);

/// True for float32 and float64.
constexpr bool is_floating(DType t) { return t != DType::Int64; }

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::Int64;
};

}  // namespace lockstep
