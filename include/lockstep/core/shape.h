// Shape: up to 8 dimensions stored inline (no heap allocation per tensor).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace lockstep {

class Shape {
 public:
  static constexpr int kMaxDims = 8;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims)
      : Shape(std::span<const std::int64_t>(dims)) {}

  int size() const { return ndim_; }
  std::int64_t operator[](int i) const { return d_[i]; }
  std::int64_t& operator[](int i) { return d_[i]; }
  /// Product of the dimensions (1 for a 0-d shape).
  std::int64_t numel() const;
  const std::int64_t* begin() const { return d_.data(); }
  const std::int64_t* end() const { return d_.data() + ndim_; }
  std::vector<std::int64_t> vec() const { return {begin(), end()}; }
  void push_back(std::int64_t v);
  /// "[2, 3]".
  std::string str() const;

  friend bool operator==(const Shape& a, const Shape& b);
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  std::array<std::int64_t, kMaxDims> d_{};
  int ndim_ = 0;
};

}  // namespace lockstep
