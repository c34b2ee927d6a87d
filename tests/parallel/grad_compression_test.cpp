// Gradient compression (ReducerOptions::compression = WireFormat::BFloat16, PyTorch's
// bf16_compress_hook) on the threads backend: the reduced gradients equal an explicit emulation
// bit for bit (each rank's bucket rounded to bf16, summed in float32 in rank order, the sum
// rounded), with several buckets, overlap on and off, all_reduce and reduce to a root, a
// parameter some ranks give no gradient and one nobody does; the has-grad and completion flags
// stay exact; the bytes reduced halve; float64 gradients and deterministic mode are refused;
// DataParallel and DistributedDataParallel (ranks x devices) hand out bf16 gradients close to
// float32's, moving fewer bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "lockstep/parallel/distributed.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

constexpr int kRanks = 3;
const std::vector<std::int64_t> kSizes = {5, 7, 3, 4};  // a, b, c, d

// Rank r's gradient of parameter j, element i: values with all 23 mantissa bits in use, so that
// rounding to bf16 changes them.
float grad_of(int r, std::size_t j, std::int64_t i) {
  return static_cast<float>((r + 1) * 0.1 + static_cast<double>(j) / 3.0 + i * 0.0137 -
                            (r == 1 ? 0.61 : 0.0));
}

// Parameter c gets a gradient on rank 0 only, d on no rank.
bool uses(int r, std::size_t j) { return j < 2 || (j == 2 && r == 0); }

TEST(GradCompression, BFloat16BucketsEqualTheEmulationBitForBit) {
  for (std::int64_t cap : {std::int64_t{16}, std::int64_t{1} << 20})
    for (bool overlap : {true, false})
      for (int root : {-1, 0})
        for (auto wire : {dist::WireFormat::Native, dist::WireFormat::BFloat16}) {
          const bool bf16 = wire == dist::WireFormat::BFloat16;
          const std::string what = "cap " + std::to_string(cap) + ", overlap " +
                                   std::to_string(overlap) + ", root " + std::to_string(root) +
                                   (bf16 ? ", bf16" : ", native");
          std::vector<std::vector<Tensor>> grads(kRanks);
          std::vector<std::vector<char>> has(kRanks);
          std::vector<int> completed(kRanks);
          std::vector<std::int64_t> bytes(kRanks);
          std::size_t buckets = 0;
          run_ranks(kRanks, [&](int r, const std::shared_ptr<dist::ProcessGroup>& group) {
            std::vector<Tensor> params;
            for (auto n : kSizes) params.push_back(zeros({n}).requires_grad_(true));
            auto flat = parallel::FlatBuffer::build(params, cpu(0));
            parallel::GradientReducer reducer(
                flat, group, {.bucket_cap_bytes = cap, .overlap = overlap, .compression = wire},
                root);
            reducer.prepare();
            Tensor loss = zeros({});
            for (std::size_t j = 0; j < params.size(); ++j) {
              if (!uses(r, j)) continue;
              std::vector<float> g;
              for (std::int64_t i = 0; i < kSizes[j]; ++i) g.push_back(grad_of(r, j, i));
              loss = add(loss, sum(mul(params[j], tensor(std::span<const float>(g)))));
            }
            loss.backward();
            reducer.finalize();
            const auto k = static_cast<std::size_t>(r);
            for (std::size_t j = 0; j < params.size(); ++j) {
              has[k].push_back(reducer.has_grad(j));
              grads[k].push_back(params[j].grad().defined() ? params[j].grad().clone() : Tensor());
            }
            completed[k] = reducer.completed_ranks();
            bytes[k] = reducer.bytes_reduced();
            if (r == 0) buckets = reducer.num_buckets();
          });
          EXPECT_EQ(buckets, cap == 16 ? 4u : 1u) << what;
          for (int r = 0; r < kRanks; ++r) {
            if (root >= 0 && r != root) continue;  // unspecified on the other ranks
            const auto k = static_cast<std::size_t>(r);
            EXPECT_EQ(completed[k], kRanks) << what;
            for (std::size_t j = 0; j < kSizes.size(); ++j) {
              const bool any = j < 3;
              ASSERT_EQ(has[k][j] != 0, any) << what << ", param " << j;
              ASSERT_EQ(grads[k][j].defined(), any) << what << ", param " << j;
              if (!any) continue;
              const auto got = grads[k][j].to_vector<float>();
              for (std::int64_t i = 0; i < kSizes[j]; ++i) {
                // Ranks without a gradient contribute zeros; float32 sum in rank order.
                float s = 0;
                for (int q = 0; q < kRanks; ++q) {
                  const float g = uses(q, j) ? grad_of(q, j, i) : 0.f;
                  s += bf16 ? round_to_bfloat16(g) : g;
                }
                const float want = bf16 ? round_to_bfloat16(s) : s;
                EXPECT_EQ(std::memcmp(&got[static_cast<std::size_t>(i)], &want, 4), 0)
                    << what << ", param " << j << "[" << i << "]: " << got[i] << " vs " << want;
              }
            }
          }
          // Bytes: 4 per gradient element natively, 2 with bf16; the flags (4 parameters and the
          // completion flag) 4 each: natively padded to 16 in front of the last bucket, with
          // bf16 in a collective of their own.
          const std::int64_t numel = 5 + 7 + 3 + 4;
          EXPECT_EQ(bytes[0], bf16 ? 2 * numel + 4 * 5 : 4 * (numel + 16)) << what;
        }
}

TEST(GradCompression, Float64GradientsAreADTypeError) {
  auto groups = dist::new_thread_group(2);
  Tensor a = zeros({3}, kFloat64).requires_grad_(true);
  auto flat = parallel::FlatBuffer::build({a}, cpu(0));
  expect_error<DTypeError>(
      [&] {
        parallel::GradientReducer r(flat, groups[0], {.compression = dist::WireFormat::BFloat16});
      },
      {"bfloat16 gradient compression", "float32", "float64"});
}

TEST(GradCompression, RefusedInDeterministicMode) {
  parallel::DataParallelOptions o;
  o.deterministic = true;
  o.reducer.compression = dist::WireFormat::BFloat16;
  expect_error<ValueError>(
      [&] { nn::DataParallel dp(std::make_shared<nn::Linear>(3, 2), cpus(2), std::nullopt, o); },
      {"reducer.compression", "deterministic"});
  // DistributedDataParallel too (one rank: its construction is not collective then).
  auto groups = dist::new_thread_group(1);
  parallel::DistributedDataParallelOptions d;
  d.deterministic = true;
  d.reducer.compression = dist::WireFormat::BFloat16;
  expect_error<ValueError>(
      [&] {
        parallel::DistributedDataParallel ddp(std::make_shared<nn::Linear>(3, 2), groups[0], d);
      },
      {"reducer.compression", "deterministic"});
}

// One step of a Linear(6, 5) - Tanh - Linear(5, 3) on `x`, `y` through DataParallel over
// `devices` CPU devices (DistributedDataParallel over `ranks` thread ranks when ranks > 1, each
// with `devices` local devices and its half of the batch): rank 0's gradients and bytes moved.
struct Step {
  std::vector<Tensor> grads;
  std::int64_t bytes = 0;
};
Step one_step(int ranks, int devices, dist::WireFormat wire) {
  manual_seed(5);
  const Tensor x = randn({16, 6}), y = randint(0, 3, {16});
  std::vector<std::shared_ptr<nn::Module>> nets;
  for (int r = 0; r < ranks; ++r) {
    manual_seed(9);
    nets.push_back(
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Linear>(6, 5), std::make_shared<nn::Tanh>(),
            std::make_shared<nn::Linear>(5, 3)}));
  }
  Step out;
  auto finish = [&](nn::Module& net, std::int64_t bytes) {
    for (auto& p : net.parameters()) out.grads.push_back(p.grad().clone());
    out.bytes = bytes;
  };
  parallel::ReducerOptions reducer{.bucket_cap_bytes = 64, .compression = wire};
  if (ranks == 1) {
    parallel::DataParallelOptions o;
    o.threads_per_device = 1;
    o.reducer = reducer;
    nn::DataParallel dp(nets[0], cpus(devices), std::nullopt, o);
    dp.forward_backward(x, y, nn::CrossEntropyLoss());
    finish(*nets[0], dp.bytes_moved_last_step());
    return out;
  }
  run_ranks(ranks, [&](int r, const std::shared_ptr<dist::ProcessGroup>& group) {
    parallel::DistributedDataParallelOptions o;
    o.device_ids = cpus(devices);
    o.threads_per_device = 1;
    o.reducer = reducer;
    parallel::DistributedDataParallel ddp(nets[static_cast<std::size_t>(r)], group, o);
    const std::int64_t rows = 16 / ranks;
    ddp.forward_backward(x.narrow(0, r * rows, rows), y.narrow(0, r * rows, rows),
                         nn::CrossEntropyLoss());
    if (r == 0) finish(*nets[0], ddp.bytes_moved_last_step());
  });
  // Every rank holds rank 0's gradients, bit for bit.
  for (int r = 1; r < ranks; ++r) {
    const auto params = nets[static_cast<std::size_t>(r)]->parameters();
    for (std::size_t j = 0; j < params.size(); ++j)
      EXPECT_TRUE(BitEqual(params[j].grad(), out.grads[j])) << "rank " << r << ", grad " << j;
  }
  return out;
}

TEST(GradCompression, DataParallelAndDdpHandOutBFloat16GradientsMovingFewerBytes) {
  for (auto [ranks, devices] : std::vector<std::pair<int, int>>{{1, 3}, {2, 1}, {2, 2}}) {
    const std::string what =
        std::to_string(ranks) + " ranks x " + std::to_string(devices) + " devices";
    const Step native = one_step(ranks, devices, dist::WireFormat::Native);
    const Step bf16 = one_step(ranks, devices, dist::WireFormat::BFloat16);
    ASSERT_EQ(native.grads.size(), bf16.grads.size()) << what;
    bool differs = false;
    for (std::size_t j = 0; j < native.grads.size(); ++j) {
      for (float v : bf16.grads[j].to_vector<float>())
        EXPECT_EQ(round_to_bfloat16(v), v) << what << ": grad " << j << " is not bf16";
      // Relative error of a few bf16 roundings (2^-8 each) of the summands and the sum.
      EXPECT_TRUE(AllClose(bf16.grads[j], native.grads[j], 0.02, 1e-3)) << what << ": grad " << j;
      differs = differs || !BitEqual(bf16.grads[j], native.grads[j]);
    }
    EXPECT_TRUE(differs) << what << ": compression changed nothing";
    EXPECT_LT(bf16.bytes, native.bytes) << what;
    EXPECT_GT(bf16.bytes, 0) << what;
  }
}

}  // namespace
}  // namespace lockstep::testing
