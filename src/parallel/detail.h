// Helpers shared by the DataParallel sources (internal).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "lockstep/nn/module.h"
#include "lockstep/ops/detail/tree_sum.h"  // tree_sum_columns, tree_sum

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

// Deterministic mode's promise (the bits of one device for any device count) cannot hold for a
// layer whose forward mixes a shard's samples (BatchNorm in training, without a collective that
// spans the shards): ValueError naming the layer and the fix (data_parallel_deterministic.cpp).
void refuse_batch_statistics(const nn::Module& m);

// count_s / total (all zero when nothing counts).
inline std::vector<double> normalized(std::vector<double> counts, double total) {
  for (double& c : counts) c = total > 0 ? c / total : 0.0;
  return counts;
}

inline double sum_of(const std::vector<double>& v) {
  double t = 0;
  for (double x : v) t += x;
  return t;
}

}  // namespace lockstep::parallel::detail
