// The "threads" ProcessGroup backend: ranks are threads of one process sharing memory. A
// collective is a rendezvous: every rank publishes its buffer, then each rank reduces its own
// slice of the elements across all ranks (in rank order) and writes the result into every rank's
// buffer (reduce: into the destination rank's only); no element is touched by two ranks, so no
// locking is needed beyond the two barriers. Started (asynchronous) collectives run this same code
// on the member's communication thread (dist/comm_queue.h); every blocking collective first waits
// for them (drain), so the member's collectives meet their peers in the order they were called.
// The bfloat16 wire format is the base class's emulation (round, float32 all_reduce, round): in
// shared memory there is nothing to halve. The members' shared state (barrier, slots, abort) is
// in thread_rendezvous.h.
#include <algorithm>
#include <cstring>
#include <string>

#include "dist/comm_queue.h"
#include "dist/reduce_op.h"
#include "dist/threads/thread_rendezvous.h"
#include "lockstep/dist/mpi.h"
#include "lockstep/dist/nccl.h"
#include "lockstep/dist/process_group.h"

namespace lockstep::dist {

namespace {

using threads_detail::Shared;

using detail::with_op;

class ThreadGroup : public ProcessGroup {
 public:
  ThreadGroup(std::shared_ptr<Shared> shared, int rank) : s_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }
  std::string backend() const override { return "threads"; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    queue_.drain();
    reduce_into(t, op, -1, "all_reduce");
  }

  // Like all_reduce, but each rank writes its slice of the result into dst's buffer only.
  void reduce(Tensor& t, int dst, ReduceOp op) override {
    queue_.drain();
    check_root("reduce", dst);
    reduce_into(t, op, dst, "reduce");
  }

  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op, WireFormat wire) override {
    return detail::queue_all_reduce(queue_, *this, t, op, wire);
  }
  std::shared_ptr<Work> reduce_async(Tensor& t, int dst, ReduceOp op, WireFormat wire) override {
    return detail::queue_reduce(queue_, *this, t, dst, op, wire);
  }
  std::shared_ptr<Work> all_gather_async(std::vector<Tensor>& outputs,
                                         const Tensor& input) override {
    return detail::queue_all_gather(queue_, *this, outputs, input);
  }
  std::shared_ptr<Work> reduce_scatter_async(Tensor& output, const std::vector<Tensor>& inputs,
                                             ReduceOp op) override {
    return detail::queue_reduce_scatter(queue_, *this, output, inputs, op);
  }

  void broadcast(Tensor& t, int root) override {
    queue_.drain();
    check_root("broadcast", root);
    publish(t.raw_data(), t.numel(), t.dtype());
    check_matching("broadcast");
    if (rank_ != root)
      std::memcpy(t.raw_data(), s_->slots[root].data,
                  static_cast<std::size_t>(t.numel()) * element_size(t.dtype()));
    s_->arrive_and_wait();
  }

  void all_gather(std::vector<Tensor>& outputs, const Tensor& input) override {
    queue_.drain();
    if (static_cast<int>(outputs.size()) != size())
      throw ValueError("all_gather: expected " + std::to_string(size()) + " outputs, got " +
                       std::to_string(outputs.size()));
    publish(input.raw_data(), input.numel(), input.dtype());
    check_matching("all_gather");
    for (int r = 0; r < size(); ++r) {
      if (outputs[r].numel() != input.numel() || outputs[r].dtype() != input.dtype())
        throw ShapeError("all_gather: output " + std::to_string(r) + " " +
                         outputs[r].shape().str() + " does not match input " + input.shape().str());
      std::memcpy(outputs[r].raw_data(), s_->slots[r].data,
                  static_cast<std::size_t>(input.numel()) * element_size(input.dtype()));
    }
    s_->arrive_and_wait();
  }

  void reduce_scatter(Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) override {
    queue_.drain();
    if (static_cast<int>(inputs.size()) != size())
      throw ValueError("reduce_scatter: expected " + std::to_string(size()) + " inputs, got " +
                       std::to_string(inputs.size()));
    publish(output.raw_data(), output.numel(), output.dtype(), &inputs);
    check_matching("reduce_scatter");
    std::int64_t n = output.numel();
    auto go = [&](auto zero) {
      using T = decltype(zero);
      T* out = output.data_ptr<T>();
      with_op<T>(op, [&](auto combine) {
        for (std::int64_t i = 0; i < n; ++i) {
          T acc = (*s_->slots[0].list)[rank_].template data_ptr<T>()[i];
          for (int r = 1; r < size(); ++r)
            acc = combine(acc, (*s_->slots[r].list)[rank_].template data_ptr<T>()[i]);
          out[i] = acc;
        }
      });
    };
    if (output.dtype() == kFloat64)
      go(double{});
    else if (output.dtype() == kInt64)
      go(std::int64_t{});
    else
      go(float{});
    s_->arrive_and_wait();
  }

  void barrier() override {
    queue_.drain();
    s_->arrive_and_wait();
  }
  void abort(const std::string& reason) override { s_->abort(reason); }
  void clear_abort() override { s_->clear_abort(); }

 private:
  void publish(void* data, std::int64_t numel, DType dtype,
               const std::vector<Tensor>* list = nullptr) {
    s_->set_slot(rank_, {data, numel, dtype, list});
    s_->arrive_and_wait();
  }

  // Every rank reads the same published slots, so every rank makes the same decision. On a
  // mismatch all ranks pass one more barrier before throwing: otherwise a rank that throws
  // early could publish its next collective's slot while a slower rank still reads this one's.
  void check_matching(const char* op) {
    const auto& first = s_->slots[0];
    for (int r = 1; r < size(); ++r) {
      const auto& o = s_->slots[r];
      if (o.dtype == first.dtype && o.numel == first.numel) continue;
      const std::string msg = std::string(op) + ": rank " + std::to_string(r) + " passed " +
                              std::to_string(o.numel) + " " + to_string(o.dtype) +
                              " elements but rank 0 passed " + std::to_string(first.numel) + " " +
                              to_string(first.dtype);
      const bool dtype = o.dtype != first.dtype;
      s_->arrive_and_wait();
      if (dtype) throw DTypeError(msg);
      throw ShapeError(msg);
    }
  }

  // all_reduce (dst < 0) and reduce (into rank dst): publish, check, this rank's slice, done.
  void reduce_into(Tensor& t, ReduceOp op, int dst, const char* name) {
    publish(t.raw_data(), t.numel(), t.dtype());
    check_matching(name);
    auto [lo, hi] = my_slice(t.numel());
    switch (t.dtype()) {
      case DType::Float32:
        reduce_slice<float>(op, lo, hi, dst);
        break;
      case DType::Float64:
        reduce_slice<double>(op, lo, hi, dst);
        break;
      case DType::Int64:
        reduce_slice<std::int64_t>(op, lo, hi, dst);
        break;
    }
    s_->arrive_and_wait();
  }

  std::pair<std::int64_t, std::int64_t> my_slice(std::int64_t n) const {
    return {n * rank_ / size(), n * (rank_ + 1) / size()};
  }

  // Reduces elements [lo, hi) across all ranks in rank order ((b0 op b1) op b2 ...) and writes
  // the result into every rank's buffer (dst < 0) or into rank dst's only. The op is a template
  // parameter, not a per-element switch (with_op), so the loops vectorise; the common 2-rank case
  // is one fused pass.
  template <class T>
  void reduce_slice(ReduceOp op, std::int64_t lo, std::int64_t hi, int dst) {
    with_op<T>(op, [&](auto combine) { reduce_slice_with<T>(combine, lo, hi, dst); });
  }

  template <class T, class Op>
  void reduce_slice_with(Op op, std::int64_t lo, std::int64_t hi, int dst) {
    const int n = size();
    if (n == 1 || lo >= hi) return;
    if (n == 2) {
      T* __restrict a = static_cast<T*>(s_->slots[0].data);
      T* __restrict b = static_cast<T*>(s_->slots[1].data);
      if (dst >= 0) {
        T* __restrict out = dst == 0 ? a : b;
        for (std::int64_t i = lo; i < hi; ++i) out[i] = op(a[i], b[i]);
        return;
      }
      for (std::int64_t i = lo; i < hi; ++i) {
        T v = op(a[i], b[i]);
        a[i] = v;
        b[i] = v;
      }
      return;
    }
    // n > 2: accumulate a cache-sized block in rank order, then copy it to every rank.
    constexpr std::int64_t kBlock = 1024;
    T acc[kBlock];
    for (std::int64_t i0 = lo; i0 < hi; i0 += kBlock) {
      const std::int64_t m = std::min(kBlock, hi - i0);
      const T* first = static_cast<const T*>(s_->slots[0].data) + i0;
      for (std::int64_t j = 0; j < m; ++j) acc[j] = first[j];
      for (int r = 1; r < n; ++r) {
        const T* __restrict src = static_cast<const T*>(s_->slots[r].data) + i0;
        for (std::int64_t j = 0; j < m; ++j) acc[j] = op(acc[j], src[j]);
      }
      for (int r = 0; r < n; ++r)
        if (dst < 0 || r == dst)
          std::memcpy(static_cast<T*>(s_->slots[r].data) + i0, acc,
                      static_cast<std::size_t>(m) * sizeof(T));
    }
  }

  std::shared_ptr<Shared> s_;
  int rank_;
  detail::CommQueue queue_;  // last: destroyed (drained, joined) first
};

}  // namespace

void ProcessGroup::check_root(const char* op, int root) const {
  if (root < 0 || root >= size())
    throw ValueError(std::string(op) + ": root " + std::to_string(root) + " out of range for " +
                     std::to_string(size()) + " ranks");
}

std::vector<std::shared_ptr<ProcessGroup>> new_thread_group(int size) {
  if (size < 1)
    throw ValueError("new_thread_group: size must be at least 1, got " + std::to_string(size));
  auto shared = std::make_shared<Shared>(size);
  std::vector<std::shared_ptr<ProcessGroup>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<ThreadGroup>(shared, r));
  return out;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"threads"};
  if (mpi_available()) names.push_back("mpi");
  if (nccl_available()) names.push_back("nccl");
  return names;
}

}  // namespace lockstep::dist
