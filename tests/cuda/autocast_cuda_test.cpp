// Autocast on cuda:0 (include/lockstep/ops/autocast.h; cublasGemmEx with bf16 operands and
// fp32 accumulation): the rounding kernels bit for bit against the host's round_to_bfloat16;
// linear and matmul under autocast against the hand-written emulation (bit for bit on dyadic
// inputs, where every order of summation gives the same sum) and against the CPU emulation on
// normal inputs (only the order of summation differs: within one bf16 step); the bf16 golden
// trajectories on cuda:0 against the CPU's; float64 untouched; DataParallel's GPU replicas
// under the caller's region. Every test skips, printing why, where no GPU is usable.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda/cuda_test_util.h"
#include "ops/cuda/kernels.h"
#include "support/bf16_emulation.h"
#include "support/golden.h"
#include "support/tolerance.h"

namespace lockstep::testing {
namespace {

const Device kCuda0(DeviceType::CUDA, 0);

std::vector<float> rounding_inputs() {
  std::vector<float> v = random_floats(4096, 11, -1e3f, 1e3f);
  for (std::uint32_t b :
       {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu, 0x00000001u,
        0x00008000u, 0x00018000u, 0x007fffffu, 0x80010000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu,
        0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u, 0x7f800001u})
    v.push_back(std::bit_cast<float>(b));
  return v;
}

TEST(AutocastCuda, RoundingKernelsMatchTheHostBitForBit) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::vector<float> in = rounding_inputs();
  DeviceArray<float> x(in), y(std::vector<float>(in.size()));
  DeviceArray<std::uint16_t> h(std::vector<std::uint16_t>(in.size()));
  const auto exec = kernels::cuda::on_device(0);
  kernels::cuda::round_to_bfloat16(x.get(), y.get(), std::ssize(in), exec);
  kernels::cuda::cast_to_bfloat16(x.get(), h.get(), std::ssize(in), exec);
  const auto rounded = y.to_host();
  const auto halves = h.to_host();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t want = std::bit_cast<std::uint32_t>(round_to_bfloat16(in[i]));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(rounded[i]), want) << "element " << i;
    EXPECT_EQ(std::uint32_t{halves[i]} << 16, want) << "element " << i;
  }
}

struct Dims {
  std::int64_t rows, in, out;
};

class AutocastCudaLinear : public ::testing::TestWithParam<Dims> {};

TEST_P(AutocastCudaLinear, DyadicInputsEqualTheEmulationBitForBit) {
  LOCKSTEP_REQUIRE_CUDA();
  const auto [rows, in, out] = GetParam();
  const auto xv = bf16::dyadic(rows * in, 1), wv = bf16::dyadic(out * in, 2),
             bv = bf16::dyadic(out, 3), gv = bf16::dyadic(rows * out, 4);
  const auto e = bf16::linear(xv, wv, bv, gv, rows, in, out);
  Tensor x = bf16::make(xv, {rows, in}).to(kCuda0).requires_grad_(true);
  Tensor w = bf16::make(wv, {out, in}).to(kCuda0).requires_grad_(true);
  Tensor b = bf16::make(bv, {out}).to(kCuda0).requires_grad_(true);
  Tensor y;
  {
    AutocastGuard region;
    y = linear(x, w, b);
  }
  y.backward(bf16::make(gv, {rows, out}).to(kCuda0));
  EXPECT_TRUE(BitEqual(y.detach().to(cpu()), bf16::make(e.y, {rows, out})));
  EXPECT_TRUE(BitEqual(x.grad().to(cpu()), bf16::make(e.gx, {rows, in})));
  EXPECT_TRUE(BitEqual(w.grad().to(cpu()), bf16::make(e.gw, {out, in})));
  EXPECT_TRUE(BitEqual(b.grad().to(cpu()), bf16::make(e.gb, {out})));
  if (rows > 0 && out > 0) {
    EXPECT_FALSE(BitEqual(linear(x, w, b).detach().to(cpu()), y.detach().to(cpu())));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AutocastCudaLinear,
                         ::testing::Values(Dims{7, 33, 5}, Dims{64, 65, 70}, Dims{1, 1, 1},
                                           Dims{257, 129, 300}, Dims{0, 4, 3}, Dims{3, 0, 2}));

TEST(AutocastCuda, MatmulDyadicEqualsTheEmulationBitForBit) {
  LOCKSTEP_REQUIRE_CUDA();
  const std::int64_t m = 9, k = 40, n = 6;
  const auto av = bf16::dyadic(m * k, 5), bv = bf16::dyadic(k * n, 6), gv = bf16::dyadic(m * n, 7);
  Tensor a = bf16::make(av, {m, k}).to(kCuda0).requires_grad_(true);
  Tensor b = bf16::make(bv, {k, n}).to(kCuda0).requires_grad_(true);
  Tensor y;
  {
    AutocastGuard region;
    y = matmul(a, b);
  }
  y.backward(bf16::make(gv, {m, n}).to(kCuda0));
  EXPECT_TRUE(BitEqual(y.detach().to(cpu()), bf16::make(bf16::gemm(av, bv, m, k, n), {m, n})));
  EXPECT_TRUE(BitEqual(a.grad().to(cpu()),
                       bf16::make(bf16::gemm(gv, bf16::transpose(bv, k, n), m, n, k), {m, k})));
  EXPECT_TRUE(BitEqual(b.grad().to(cpu()),
                       bf16::make(bf16::gemm(bf16::transpose(av, m, k), gv, k, m, n), {k, n})));
}

// Normal inputs: CUDA's bf16 linear against the CPU's (the emulation), forward and gradients.
// Both round the same fp32 sum computed in different orders: a result may land one bf16 step
// (2^-8..2^-7 relative) away where the fp32 sums straddle a rounding boundary; the absolute part
// covers sums that cancel to near zero. Most elements must agree exactly.
TEST(AutocastCuda, LinearMatchesTheCpuEmulationUpToSummationOrder) {
  LOCKSTEP_REQUIRE_CUDA();
  manual_seed(4);
  const std::int64_t rows = 128, in = 784, out = 256;
  Tensor x = randn({rows, in}), w = randn({out, in}), b = randn({out}), g = randn({rows, out});
  auto run = [&](Device d) {
    Tensor xd = x.to(d).requires_grad_(true), wd = w.to(d).requires_grad_(true),
           bd = b.to(d).requires_grad_(true);
    Tensor y;
    {
      AutocastGuard region;
      y = linear(xd, wd, bd);
    }
    y.backward(g.to(d));
    return std::vector<Tensor>{y.detach().to(cpu()), xd.grad().to(cpu()), wd.grad().to(cpu()),
                               bd.grad().to(cpu())};
  };
  const auto host = run(cpu()), gpu = run(kCuda0);
  const double step = std::ldexp(1.0, -7);
  for (std::size_t i = 0; i < host.size(); ++i) {
    EXPECT_TRUE(bf16::all_bf16(gpu[i])) << "output " << i;
    EXPECT_TRUE(AllClose(gpu[i], host[i], step, 1e-3)) << "output " << i;
    const auto a = gpu[i].to_vector<float>(), c = host[i].to_vector<float>();
    std::size_t same = 0;
    for (std::size_t j = 0; j < a.size(); ++j) same += a[j] == c[j];
    EXPECT_GE(static_cast<double>(same), 0.95 * static_cast<double>(a.size())) << "output " << i;
  }
}

TEST(AutocastCuda, Float64IsUntouched) {
  LOCKSTEP_REQUIRE_CUDA();
  manual_seed(5);
  Tensor x = randn({5, 11}, kFloat64).to(kCuda0), w = randn({3, 11}, kFloat64).to(kCuda0);
  const auto plain = linear(x, w).to(cpu()).to_vector<double>();
  AutocastGuard region;
  EXPECT_EQ(linear(x, w).to(cpu()).to_vector<double>(), plain);
}

// The bf16 golden trajectories (tests/data/bf16/autocast.json's runs) on cuda:0 against the
// same runs on the CPU: only GEMM summation order differs, which can flip a bf16 rounding now
// and then; tolerances as for 2 CPU devices against 1 (tests/parallel/autocast_parallel_test).
class GoldenBf16Cuda : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenBf16Cuda, MatchesTheCpuBf16Trajectory) {
  LOCKSTEP_REQUIRE_CUDA();
  std::ifstream in(test_data_path("bf16/autocast.json"));
  ASSERT_TRUE(in) << test_data_path("bf16/autocast.json");
  const auto file = nlohmann::json::parse(in);
  const auto& expected = file.at("runs").at(GetParam());
  const auto steps = expected.at("steps").get<std::int64_t>();
  const Golden g = load_golden(GetParam());
  const GoldenRun host = run_golden(g, cpu(), true, steps);
  const GoldenRun gpu = run_golden(g, kCuda0, true, steps);
  EXPECT_TRUE(AllClose(gpu.step_losses, host.step_losses, 0, 2e-4));
  EXPECT_TRUE(AllClose(gpu.step_losses,
                       expected.at("emulated_step_losses").get<std::vector<double>>(), 0, 2e-4));
  for (const auto& [name, t] : host.final_params)
    EXPECT_TRUE(AllClose(gpu.final_params.at(name), t, 0, 1e-4)) << name;
}

INSTANTIATE_TEST_SUITE_P(Runs, GoldenBf16Cuda,
                         ::testing::Values("seed_mlp_sgd", "mlp_momentum_uneven"),
                         [](const auto& info) { return info.param; });

TEST(AutocastCuda, DataParallelGpuReplicasRunUnderTheCallersRegion) {
  LOCKSTEP_REQUIRE_CUDA();
  manual_seed(6);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(10, 7), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(7, 3)});
  auto dp = std::make_shared<nn::DataParallel>(model, std::vector<Device>{kCuda0});
  Tensor x = randn({9, 10});
  {
    AutocastGuard region;
    EXPECT_TRUE(bf16::all_bf16(dp->forward(x)));
  }
  EXPECT_FALSE(bf16::all_bf16(dp->forward(x)));
}

}  // namespace
}  // namespace lockstep::testing
