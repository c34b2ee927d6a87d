// Helpers shared by the DataParallel sources (internal).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "lockstep/nn/module.h"

namespace lockstep::parallel::detail {

// Rethrows `e` as the same lockstep error type with `prefix` added to the message.
[[noreturn]] inline void rethrow_with_prefix(std::exception_ptr e, const std::string& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const ShapeError& x) {
    throw ShapeError(prefix + x.what());
  } catch (const DTypeError& x) {
    throw DTypeError(prefix + x.what());
  } catch (const DeviceError& x) {
    throw DeviceError(prefix + x.what());
  } catch (const IndexError& x) {
    throw IndexError(prefix + x.what());
  } catch (const ValueError& x) {
    throw ValueError(prefix + x.what());
  } catch (const StateDictError& x) {
    throw StateDictError(prefix + x.what());
  } catch (const AutogradError& x) {
    throw AutogradError(prefix + x.what());
  } catch (const IoError& x) {
    throw IoError(prefix + x.what());
  } catch (const DataError& x) {
    throw DataError(prefix + x.what());
  } catch (const PeerFailedError& x) {
    throw PeerFailedError(prefix + x.what(), x.rank(), x.status());
  } catch (const TimeoutError& x) {
    throw TimeoutError(prefix + x.what());
  } catch (const DistError& x) {
    throw DistError(prefix + x.what());
  } catch (const Error& x) {
    throw Error(prefix + x.what());
  } catch (const std::exception& x) {
    throw Error(prefix + x.what());
  } catch (...) {
    throw Error(prefix + "an exception that is not a std::exception");
  }
}

// Sets every parameter's gradient to none.
inline void clear_grads(nn::Module& m) {
  for (auto& p : m.parameters()) p.set_grad(Tensor());
}

// Fixed pairwise tree over rows [0, rows) of `slots` for columns [lo, hi): the result lands in
// row 0. The tree depends only on `rows`, so the bits do not depend on who computes a column.
template <class T>
void tree_sum_columns(T* base, std::int64_t rows, std::int64_t width, std::int64_t lo,
                      std::int64_t hi) {
  for (std::int64_t stride = 1; stride < rows; stride *= 2)
    for (std::int64_t i = 0; i + stride < rows; i += 2 * stride) {
      T* dst = base + i * width;
      const T* src = base + (i + stride) * width;
      for (std::int64_t j = lo; j < hi; ++j) dst[j] += src[j];
    }
}

inline double tree_sum(std::vector<double> v) {
  auto n = static_cast<std::int64_t>(v.size());
  for (std::int64_t stride = 1; stride < n; stride *= 2)
    for (std::int64_t i = 0; i + stride < n; i += 2 * stride) v[i] += v[i + stride];
  return v.empty() ? 0.0 : v[0];
}

}  // namespace lockstep::parallel::detail
