// Internal: two's-complement wrapping arithmetic for integer tensors. PyTorch's int64 add, sub,
// mul, neg and sum wrap modulo 2^64 on overflow (torch.tensor([2**63 - 1]) + 1 is -2**63); in C++
// signed overflow is undefined behaviour (UBSan reports it, the optimiser may assume it never
// happens), so the integer case is computed in the unsigned type, whose arithmetic is modular,
// and converted back (modular since C++20, and on every compiler nvcc accepts). Floating types
// use the plain operators. Usable on the host and, under nvcc, on the device.
#pragma once

#include <type_traits>

#if defined(__CUDACC__)
#define LOCKSTEP_WRAP_HD __host__ __device__
#else
#define LOCKSTEP_WRAP_HD
#endif

namespace lockstep::detail {

template <class T>
LOCKSTEP_WRAP_HD constexpr T wrapping_add(T x, T y) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
  } else {
    return x + y;
  }
}

template <class T>
LOCKSTEP_WRAP_HD constexpr T wrapping_sub(T x, T y) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
  } else {
    return x - y;
  }
}

template <class T>
LOCKSTEP_WRAP_HD constexpr T wrapping_mul(T x, T y) noexcept {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    return x * y;
  }
}

template <class T>
LOCKSTEP_WRAP_HD constexpr T wrapping_neg(T x) noexcept {
  return wrapping_sub(T(0), x);
}

}  // namespace lockstep::detail

#undef LOCKSTEP_WRAP_HD
