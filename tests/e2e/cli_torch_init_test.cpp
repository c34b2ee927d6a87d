// `lockstep train --torch-init --seed S`: the initial parameters are those torch.manual_seed(S)
// gives PyTorch's nn.Sequential of the same layers (tests/data/torch_rng/torch_rng.json,
// "cli_mlp"), bitwise; without the flag they are Lockstep's own (Philox) draws.
#include "cli_support.h"
#include "lockstep/io/safetensors.h"
#include "support/torch_rng.h"

namespace lockstep::e2e {
namespace {

TEST(CliTorchInit, StartsFromPyTorchsSequentialAfterTheSameSeed) {
  const auto& want = testing::torch_rng()["cli_mlp"];
  TempDir dir;
  // lr 0: SGD leaves the parameters as initialised, so --save writes the initial state.
  const std::vector<std::string> args = {"train",    "--torch-init",
                                         "--seed",   std::to_string(want["seed"].get<int>()),
                                         "--model",  want["model"],
                                         "--epochs", "1",
                                         "--lr",     "0",
                                         "--save",   dir / "w.safetensors"};
  RunResult r = lockstep(args);
  ASSERT_EQ(r.status, 0) << command_text(args) << "\n" << r.err;
  auto f = safetensors::load_file(dir / "w.safetensors");
  std::size_t entries = 0;
  for (const auto& [key, e] : want["state"].items()) {
    if (key.rfind("__", 0) == 0) continue;
    ++entries;
    EXPECT_EQ(testing::torch_fnv1a64(f.at(key)), e["fnv1a64"].get<std::string>()) << key;
  }
  EXPECT_EQ(entries, f.tensors.size());

  // Without --torch-init: Lockstep's Philox draws, other values.
  RunResult plain = lockstep({"train", "--seed", "3", "--model", want["model"], "--epochs", "1",
                              "--lr", "0", "--save", dir / "p.safetensors"});
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(testing::torch_fnv1a64(safetensors::load_file(dir / "p.safetensors").at("0.weight")),
            want["state"]["0.weight"]["fnv1a64"].get<std::string>());
}

}  // namespace
}  // namespace lockstep::e2e
