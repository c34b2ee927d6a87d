// oneDNN conv2d kernels, float32 (src/ops/conv_kernels.h, family dnnl::). oneDNN 2.6 as Debian
// ships it (libdnnl-dev): CPU runtime OpenMP (DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP, libgomp).
//
// Layouts: the primitives are created with format_tag::any, so oneDNN picks its blocked layouts
// (nChw16c / OIhw16i16o ... on AVX-512, the jit:avx512_core kernels); our NCHW / OIHW buffers
// are reordered into them and the results back (plain NCHW memory gets the slower gemm:jit
// kernels). Where a chosen layout equals the plain one (e.g. C_in = 1's source) the buffer is
// used in place. Bias and its gradient are plain [C_out].
//
// Threads: oneDNN's OpenMP runtime takes its thread count from omp_get_max_threads() of the
// calling thread (an OpenMP ICV each thread has its own copy of), both when a primitive is
// created (the jit kernels fix their work split then) and when it runs. Letting it run a team
// of get_num_threads() measured slower than im2col at 2 threads (bench_cnn --devices=1: 4,870
// vs 6,530 samples/s): libgomp's idle workers spin after each region and take the cores from
// lockstep's own team running the next op (OMP_WAIT_POLICY=passive recovered it, 7,270-7,520,
// but that must be set before libgomp starts). So oneDNN always runs with 1 OpenMP thread (set
// for each call's scope, the caller's setting restored after), and the batch is split instead:
// fixed chunks of kChunk samples, spread over the calling thread's intra-op team with
// parallel_run (lockstep/core/parallel.h), as the im2col family does. No OpenMP team is ever
// started, so a DataParallel replica with 1 thread uses exactly 1 and N replicas never share a
// pool.
//
// Cache: the primitives (and their reorders) of each (geometry, direction, bias) live in a small
// map guarded by a mutex; entries are immutable after creation. The scratchpad is user-managed
// (scratchpad_mode::user) and the blocked buffers are per executing thread, so one cached
// primitive runs on several threads at once (the chunks of a call, the replicas of a model).
//
// Bits: a chunk's results depend on its samples only, and the weight and bias gradients add the
// chunks' sums in chunk order, so no bit depends on the thread count (the order depends on N).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lockstep/core/parallel.h"
#include "ops/conv_kernels.h"

#ifdef LOCKSTEP_HAS_DNNL
#include <omp.h>

#include "oneapi/dnnl/dnnl.hpp"
#endif

namespace lockstep::kernels::dnnl {

#ifndef LOCKSTEP_HAS_DNNL

bool available() { return false; }
bool conv2d_forward(const Conv2dGeom&, const float*, const float*, const float*, float*) {
  return false;
}
bool conv2d_backward_input(const Conv2dGeom&, const float*, const float*, float*) { return false; }
bool conv2d_backward_weight(const Conv2dGeom&, const float*, const float*, float*, float*) {
  return false;
}

#else

namespace {

namespace dn = ::dnnl;
using tag = dn::memory::format_tag;
using dt = dn::memory::data_type;

dn::engine& cpu_engine() {
  static dn::engine eng(dn::engine::kind::cpu, 0);
  return eng;
}

// The calling thread's OpenMP thread count set to n for the scope (oneDNN reads it).
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
    if (n != saved_) omp_set_num_threads(n);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

// 64-byte aligned per-thread buffers, grown on demand and kept: slot k of the calling thread.
class Workspace {
 public:
  float* get(int slot, std::size_t bytes) {
    Buf& b = bufs_[static_cast<std::size_t>(slot)];
    if (b.bytes < bytes) {
      std::free(b.p);
      b.bytes = (bytes + 63) / 64 * 64;
      b.p = std::aligned_alloc(64, b.bytes);
      if (!b.p) throw std::bad_alloc();
    }
    return static_cast<float*>(b.p);
  }
  ~Workspace() {
    for (auto& b : bufs_) std::free(b.p);
  }

 private:
  struct Buf {
    void* p = nullptr;
    std::size_t bytes = 0;
  };
  std::array<Buf, 5> bufs_{};
};
thread_local Workspace tls_workspace;
constexpr int kScratchSlot = 4;

enum class Dir { Forward, BackwardData, BackwardWeights };

struct Key {
  std::array<std::int64_t, 16> geom;
  int dir, bias, threads;
  bool operator<(const Key& o) const {
    if (geom != o.geom) return geom < o.geom;
    if (dir != o.dir) return dir < o.dir;
    if (bias != o.bias) return bias < o.bias;
    return threads < o.threads;
  }
};

// A plain buffer and the primitive's layout of it: `to` (plain -> blocked, inputs) or `from`
// (blocked -> plain, outputs) is empty when the layouts agree.
struct Operand {
  dn::memory::desc plain, inner;
  bool same = true;
  dn::reorder reorder;
  std::size_t scratch = 0;
};

struct Entry {
  dn::primitive prim;
  std::size_t scratch = 0;
  Operand a, b, out;  // forward: x, w, y; backward data: gy, w, gx; backward weights: x, gy, gw
};

dn::primitive_attr user_scratchpad() {
  dn::primitive_attr attr;
  attr.set_scratchpad_mode(dn::scratchpad_mode::user);
  return attr;
}

Operand make_operand(const dn::memory::desc& plain, const dn::memory::desc& inner, bool input) {
  Operand op;
  op.plain = plain;
  op.inner = inner;
  op.same = plain == inner;
  if (!op.same) {
    auto& eng = cpu_engine();
    dn::reorder::primitive_desc pd =
        input ? dn::reorder::primitive_desc(eng, plain, eng, inner, user_scratchpad())
              : dn::reorder::primitive_desc(eng, inner, eng, plain, user_scratchpad());
    op.scratch = pd.scratchpad_desc().get_size();
    op.reorder = dn::reorder(pd);
  }
  return op;
}

struct Descs {
  dn::memory::dims src, wei, bias, dst, strides, dilates, pad_l, pad_r;
  dn::memory::desc src_plain, wei_plain, dst_plain, bias_plain, src_any, wei_any, dst_any;
};

Descs make_descs(const Conv2dGeom& g) {
  Descs d;
  d.src = {g.n, g.c_in, g.h, g.w};
  d.dst = {g.n, g.c_out, g.out_h, g.out_w};
  d.bias = {g.c_out};
  const bool grouped = g.groups > 1;
  if (grouped)
    d.wei = {g.groups, g.cout_g(), g.cin_g(), g.kh, g.kw};
  else
    d.wei = {g.c_out, g.c_in, g.kh, g.kw};
  d.strides = {g.stride_h, g.stride_w};
  d.dilates = {g.dil_h - 1, g.dil_w - 1};  // oneDNN counts the gaps: PyTorch's dilation − 1
  d.pad_l = {g.pad_h, g.pad_w};
  d.pad_r = {g.pad_h, g.pad_w};
  d.src_plain = dn::memory::desc(d.src, dt::f32, tag::nchw);
  d.dst_plain = dn::memory::desc(d.dst, dt::f32, tag::nchw);
  d.wei_plain = dn::memory::desc(d.wei, dt::f32, grouped ? tag::goihw : tag::oihw);
  d.bias_plain = dn::memory::desc(d.bias, dt::f32, tag::x);
  d.src_any = dn::memory::desc(d.src, dt::f32, tag::any);
  d.dst_any = dn::memory::desc(d.dst, dt::f32, tag::any);
  d.wei_any = dn::memory::desc(d.wei, dt::f32, tag::any);
  return d;
}

dn::convolution_forward::primitive_desc forward_pd(const Descs& d, bool bias,
                                                   const dn::primitive_attr& attr) {
  auto desc =
      bias ? dn::convolution_forward::desc(dn::prop_kind::forward_training,
                                           dn::algorithm::convolution_direct, d.src_any,
                                           d.wei_any, d.bias_plain, d.dst_any, d.strides,
                                           d.dilates, d.pad_l, d.pad_r)
           : dn::convolution_forward::desc(dn::prop_kind::forward_training,
                                           dn::algorithm::convolution_direct, d.src_any,
                                           d.wei_any, d.dst_any, d.strides, d.dilates, d.pad_l,
                                           d.pad_r);
  return dn::convolution_forward::primitive_desc(desc, attr, cpu_engine());
}

std::shared_ptr<const Entry> build(const Conv2dGeom& g, Dir dir, bool bias) {
  const Descs d = make_descs(g);
  const dn::primitive_attr attr = user_scratchpad();
  auto e = std::make_shared<Entry>();
  switch (dir) {
    case Dir::Forward: {
      auto pd = forward_pd(d, bias, attr);
      e->a = make_operand(d.src_plain, pd.src_desc(), true);
      e->b = make_operand(d.wei_plain, pd.weights_desc(), true);
      e->out = make_operand(d.dst_plain, pd.dst_desc(), false);
      e->scratch = pd.scratchpad_desc().get_size();
      e->prim = dn::convolution_forward(pd);
      break;
    }
    case Dir::BackwardData: {
      auto hint = forward_pd(d, false, dn::primitive_attr());
      dn::convolution_backward_data::desc desc(dn::algorithm::convolution_direct, d.src_any,
                                               d.wei_any, d.dst_any, d.strides, d.dilates,
                                               d.pad_l, d.pad_r);
      dn::convolution_backward_data::primitive_desc pd(desc, attr, cpu_engine(), hint);
      e->a = make_operand(d.dst_plain, pd.diff_dst_desc(), true);
      e->b = make_operand(d.wei_plain, pd.weights_desc(), true);
      e->out = make_operand(d.src_plain, pd.diff_src_desc(), false);
      e->scratch = pd.scratchpad_desc().get_size();
      e->prim = dn::convolution_backward_data(pd);
      break;
    }
    case Dir::BackwardWeights: {
      auto hint = forward_pd(d, bias, dn::primitive_attr());
      auto desc = bias ? dn::convolution_backward_weights::desc(
                             dn::algorithm::convolution_direct, d.src_any, d.wei_any,
                             d.bias_plain, d.dst_any, d.strides, d.dilates, d.pad_l, d.pad_r)
                       : dn::convolution_backward_weights::desc(
                             dn::algorithm::convolution_direct, d.src_any, d.wei_any, d.dst_any,
                             d.strides, d.dilates, d.pad_l, d.pad_r);
      dn::convolution_backward_weights::primitive_desc pd(desc, attr, cpu_engine(), hint);
      e->a = make_operand(d.src_plain, pd.src_desc(), true);
      e->b = make_operand(d.dst_plain, pd.diff_dst_desc(), true);
      e->out = make_operand(d.wei_plain, pd.diff_weights_desc(), false);
      e->scratch = pd.scratchpad_desc().get_size();
      e->prim = dn::convolution_backward_weights(pd);
      break;
    }
  }
  return e;
}

// Primitives per (geometry, direction, bias, OpenMP threads at creation: 1 as called here);
// null when oneDNN refused the shape (remembered too, so it is asked once). Cleared when it
// grows past kMaxEntries.
constexpr std::size_t kMaxEntries = 256;
std::mutex cache_mutex;
std::map<Key, std::shared_ptr<const Entry>> cache;

std::shared_ptr<const Entry> lookup(const Conv2dGeom& g, Dir dir, bool bias, int threads) {
  const Key key{{g.n, g.c_in, g.h, g.w, g.c_out, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h,
                 g.pad_w, g.dil_h, g.dil_w, g.groups, g.out_h, g.out_w},
                static_cast<int>(dir),
                bias ? 1 : 0,
                threads};
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<const Entry> e;
  try {
    e = build(g, dir, bias);  // outside the lock: primitive creation may JIT (milliseconds)
  } catch (const dn::error&) {
    e = nullptr;  // unsupported here: the caller falls back to im2col
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() >= kMaxEntries) cache.clear();
  return cache.emplace(key, e).first->second;
}

// Runs one cached entry: a and b are inputs, out the output (plain pointers); `extra` adds
// arguments that need no reorder (bias, diff bias).
void execute(const Entry& e, int arg_a, const float* a, int arg_b, const float* b, int arg_out,
             float* out, const std::vector<std::pair<int, dn::memory>>& extra) {
  auto& eng = cpu_engine();
  thread_local dn::stream stream(eng);
  Workspace& ws = tls_workspace;
  const std::size_t scratch_bytes =
      std::max({e.scratch, e.a.scratch, e.b.scratch, e.out.scratch, std::size_t(1)});
  dn::memory scratch(dn::memory::desc({static_cast<dn::memory::dim>(scratch_bytes)}, dt::u8,
                                      tag::x),
                     eng, ws.get(kScratchSlot, scratch_bytes));
  auto input = [&](const Operand& op, const float* p, int slot) {
    dn::memory user(op.plain, eng, const_cast<float*>(p));
    if (op.same) return user;
    dn::memory inner(op.inner, eng, ws.get(slot, op.inner.get_size()));
    op.reorder.execute(stream, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, inner},
                                {DNNL_ARG_SCRATCHPAD, scratch}});
    return inner;
  };
  dn::memory ma = input(e.a, a, 0), mb = input(e.b, b, 1);
  dn::memory user_out(e.out.plain, eng, out);
  dn::memory mout =
      e.out.same ? user_out : dn::memory(e.out.inner, eng, ws.get(2, e.out.inner.get_size()));
  std::unordered_map<int, dn::memory> args{
      {arg_a, ma}, {arg_b, mb}, {arg_out, mout}, {DNNL_ARG_SCRATCHPAD, scratch}};
  for (const auto& [k, m] : extra) args.emplace(k, m);
  e.prim.execute(stream, args);
  if (!e.out.same)
    e.out.reorder.execute(stream, {{DNNL_ARG_FROM, mout}, {DNNL_ARG_TO, user_out},
                                   {DNNL_ARG_SCRATCHPAD, scratch}});
  stream.wait();
}

dn::memory bias_memory(const Conv2dGeom& g, const float* p) {
  return dn::memory(dn::memory::desc({g.c_out}, dt::f32, tag::x), cpu_engine(),
                    const_cast<float*>(p));
}

// Samples per primitive call: the batch runs in fixed chunks of this many, the chunks spread
// over the calling thread's intra-op team, each on one thread (oneDNN with 1 OpenMP thread).
// Fixed chunks make every bit independent of the thread count: a sample's output and input
// gradient come from its chunk's call, the weight and bias gradients are the chunks' sums added
// in chunk order (as the im2col family's chunks of 8). Deterministic mode's shards of 8 are one
// chunk.
constexpr std::int64_t kChunk = 16;
// Below this many multiply-adds per call the chunks run on the calling thread.
constexpr std::int64_t kParallelMacs = std::int64_t(1) << 18;

// The chunks [c0, c1) of n samples, and the geometry of one chunk.
std::int64_t num_chunks(const Conv2dGeom& g) { return (g.n + kChunk - 1) / kChunk; }
Conv2dGeom chunk_geom(const Conv2dGeom& g, std::int64_t c) {
  Conv2dGeom s = g;
  s.n = std::min(kChunk, g.n - c * kChunk);
  return s;
}

// The entries of a full chunk and of the tail chunk (null tail when n divides evenly); false
// when oneDNN refused either.
struct Plan {
  std::shared_ptr<const Entry> full, tail;
  const Entry& at(const Conv2dGeom& g, std::int64_t c) const {
    return chunk_geom(g, c).n == kChunk ? *full : *tail;
  }
};
bool plan(const Conv2dGeom& g, Dir dir, bool bias, Plan& p) {
  const std::int64_t chunks = num_chunks(g);
  if (g.n >= kChunk) {
    p.full = lookup(chunk_geom(g, 0), dir, bias, 1);
    if (!p.full) return false;
  }
  if (g.n % kChunk != 0) {
    p.tail = lookup(chunk_geom(g, chunks - 1), dir, bias, 1);
    if (!p.tail) return false;
  }
  return true;
}

// Runs body(c) for every chunk: contiguous blocks of chunks on the team when the call is large
// enough, else all on the calling thread. Each task runs oneDNN with 1 OpenMP thread.
template <class Body>
void for_chunks(const Conv2dGeom& g, Body body) {
  const std::int64_t chunks = num_chunks(g);
  const std::int64_t macs = g.n * g.c_out * g.col_rows() * g.out_hw();
  const int parts = static_cast<int>(std::min<std::int64_t>(get_num_threads(), chunks));
  if (parts <= 1 || macs < kParallelMacs) {
    for (std::int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  parallel_run(parts, [&](int t) {
    OmpThreads omp(1);
    for (std::int64_t c = chunks * t / parts; c < chunks * (t + 1) / parts; ++c) body(c);
  });
}

}  // namespace

bool available() { return true; }

bool conv2d_forward(const Conv2dGeom& g, const float* x, const float* w, const float* bias,
                    float* y) {
  if (g.n == 0) return false;
  OmpThreads omp(1);
  Plan p;
  if (!plan(g, Dir::Forward, bias != nullptr, p)) return false;
  const std::int64_t xs = g.c_in * g.h * g.w, ys = g.c_out * g.out_hw();
  for_chunks(g, [&](std::int64_t c) {
    std::vector<std::pair<int, dn::memory>> extra;
    if (bias) extra.emplace_back(DNNL_ARG_BIAS, bias_memory(g, bias));
    execute(p.at(g, c), DNNL_ARG_SRC, x + c * kChunk * xs, DNNL_ARG_WEIGHTS, w, DNNL_ARG_DST,
            y + c * kChunk * ys, extra);
  });
  return true;
}

bool conv2d_backward_input(const Conv2dGeom& g, const float* gy, const float* w, float* gx) {
  if (g.n == 0) return false;
  OmpThreads omp(1);
  Plan p;
  if (!plan(g, Dir::BackwardData, false, p)) return false;
  const std::int64_t xs = g.c_in * g.h * g.w, ys = g.c_out * g.out_hw();
  for_chunks(g, [&](std::int64_t c) {
    execute(p.at(g, c), DNNL_ARG_DIFF_DST, gy + c * kChunk * ys, DNNL_ARG_WEIGHTS, w,
            DNNL_ARG_DIFF_SRC, gx + c * kChunk * xs, {});
  });
  return true;
}

bool conv2d_backward_weight(const Conv2dGeom& g, const float* gy, const float* x, float* gw,
                            float* gb) {
  if (g.n == 0 || !gw) return false;  // bias only: the im2col family's row sums
  OmpThreads omp(1);
  Plan p;
  if (!plan(g, Dir::BackwardWeights, gb != nullptr, p)) return false;
  const std::int64_t xs = g.c_in * g.h * g.w, ys = g.c_out * g.out_hw();
  const std::int64_t chunks = num_chunks(g), wn = g.w_numel(), bn = gb ? g.c_out : 0;
  // One partial sum per chunk (the first chunk's straight into gw / gb), then added in order.
  std::vector<float> pw(static_cast<std::size_t>((chunks - 1) * wn)),
      pb(static_cast<std::size_t>((chunks - 1) * bn));
  for_chunks(g, [&](std::int64_t c) {
    float* cw = c == 0 ? gw : &pw[static_cast<std::size_t>((c - 1) * wn)];
    float* cb = c == 0 ? gb : gb ? &pb[static_cast<std::size_t>((c - 1) * bn)] : nullptr;
    std::vector<std::pair<int, dn::memory>> extra;
    if (gb) extra.emplace_back(DNNL_ARG_DIFF_BIAS, bias_memory(g, cb));
    execute(p.at(g, c), DNNL_ARG_SRC, x + c * kChunk * xs, DNNL_ARG_DIFF_DST,
            gy + c * kChunk * ys, DNNL_ARG_DIFF_WEIGHTS, cw, extra);
  });
  for (std::int64_t c = 1; c < chunks; ++c) {
    const float* cw = &pw[static_cast<std::size_t>((c - 1) * wn)];
    for (std::int64_t k = 0; k < wn; ++k) gw[k] += cw[k];
    if (gb) {
      const float* cb = &pb[static_cast<std::size_t>((c - 1) * bn)];
      for (std::int64_t k = 0; k < bn; ++k) gb[k] += cb[k];
    }
  }
  return true;
}

#endif  // LOCKSTEP_HAS_DNNL

}  // namespace lockstep::kernels::dnnl
