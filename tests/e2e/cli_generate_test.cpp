// End-to-end tests of `lockstep generate` (issue 20): greedy generation from nanoGPT's model
// trained by PyTorch gives PyTorch's tokens (tests/data/gpt_generate/, make_generate_golden.py),
// sampling is seeded, files written by `lockstep train` generate with no other flag, and bad
// input is one line with exit status 2. Also: a --save file of a gpt: model loads into
// nanoGPT's model with strict=True (where /usr/bin/python3 has PyTorch).
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "support/golden.h"

namespace lockstep::e2e {
namespace {

const std::string kWeights = testing::test_data_path("gpt_generate/weights.safetensors");

nlohmann::json golden() {
  return nlohmann::json::parse(read_text(testing::test_data_path("gpt_generate/generate.json")));
}

RunResult generate(const std::vector<std::string>& args) {
  RunResult r = lockstep(std::vector<std::string>{"generate"} + args);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  return r;
}

TEST(CliGenerate, GreedyTokensEqualPyTorchsFromNanoGptsModel) {
  const nlohmann::json g = golden();
  ASSERT_EQ(g["cases"].size(), 4u);
  for (const auto& c : g["cases"]) {
    const std::string prompt = c["prompt"], text = c["text"];
    const std::string n = std::to_string(c["max_new_tokens"].get<int>());
    SCOPED_TRACE(prompt);
    EXPECT_EQ(generate({"--weights", kWeights, "--prompt", prompt, "--max-new-tokens", n,
                        "--temperature", "0"})
                  .out,
              prompt + text + "\n");
    // nanoGPT's own greedy call: generate(idx, n, temperature=1.0, top_k=1).
    EXPECT_EQ(generate({"--weights", kWeights, "--prompt", prompt, "--max-new-tokens", n,
                        "--temperature", "1", "--top-k", "1", "--seed", "9"})
                  .out,
              prompt + text + "\n");
  }
}

TEST(CliGenerate, SamplingIsSeeded) {
  const std::vector<std::string> args{"--weights",        kWeights, "--prompt",      "the",
                                      "--max-new-tokens", "200",    "--temperature", "2",
                                      "--top-k",          "0"};
  const std::string a = generate(args + std::vector<std::string>{"--seed", "1"}).out;
  EXPECT_EQ(a.size(), 204u);  // the prompt, 200 tokens, the closing newline
  EXPECT_EQ(a.substr(0, 3), "the");
  EXPECT_EQ(a, generate(args + std::vector<std::string>{"--seed", "1"}).out);
  EXPECT_NE(a, generate(args + std::vector<std::string>{"--seed", "2"}).out);
  const std::string vocab = "\n !.?abcdefghilmnorstwxy";
  for (char ch : a) EXPECT_NE(vocab.find(ch), std::string::npos) << int(ch);
  EXPECT_EQ(generate({"--weights", kWeights, "--prompt", "egg", "--max-new-tokens", "0"}).out,
            "egg\n");
}

TEST(CliGenerate, FilesOfLockstepTrainNeedNoOtherFlag) {
  TempDir dir;
  write_text(dir / "t.txt", read_text(testing::test_data_path("gpt_generate/text.txt")));
  RunResult r = lockstep({"train", "--data", "text:" + (dir / "t.txt"), "--model",
                          "gpt:layers=1,heads=2,embd=16,block=8", "--max-iters", "3",
                          "--eval-iters", "1", "--batch-size", "4", "--quiet", "--save", dir / "w",
                          "--checkpoint-dir", dir / "ck", "--devices", "cpu:0"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string from_save =
      generate({"--weights", dir / "w", "--prompt", "a dog", "--max-new-tokens", "20"}).out;
  EXPECT_EQ(from_save.size(), 26u);
  EXPECT_EQ(generate({"--weights", dir / "ck/iter-000003.safetensors", "--prompt", "a dog",
                      "--max-new-tokens", "20"})
                .out,
            from_save);
}

TEST(CliGenerate, BadInputIsOneLine) {
  TempDir dir;
  ASSERT_EQ(lockstep({"train", "--epochs", "1", "--save", dir / "mlp"}).status, 0);
  expect_error({"generate", "--weights", dir / "mlp", "--prompt", "a"},
               {dir / "mlp", "metadata 'tokenizer' missing"});
  expect_error({"generate", "--weights", kWeights, "--prompt", "the cat zzz"},
               {"--prompt", "'z'", "byte offset 8", "not in the model's vocabulary"});
  expect_error({"generate", "--weights", kWeights, "--prompt", ""}, {"--prompt", "empty"});
  expect_error({"generate", "--weights", dir / "none", "--prompt", "a"}, {dir / "none"});
  expect_usage_error({"generate", "--prompt", "a"}, {"--weights"});
  expect_usage_error({"generate", "--weights", kWeights, "--temperature", "-1"}, {"--temperature"});
  expect_usage_error({"generate", "--weights", kWeights, "--top-k", "-3"}, {"--top-k"});
}

TEST(CliGptPyTorch, SavedFilesLoadStrictlyIntoNanoGptsModel) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 not installed";
  TempDir dir;
  write_text(dir / "t.txt", read_text(testing::test_data_path("gpt_generate/text.txt")));
  ASSERT_EQ(lockstep({"train", "--data", "text:" + (dir / "t.txt"), "--model",
                      "gpt:layers=2,heads=2,embd=32,block=16,bias=true", "--max-iters", "2",
                      "--eval-iters", "1", "--batch-size", "4", "--quiet", "--save", dir / "w"})
                .status,
            0);
  write_text(dir / "load.py",
             "import sys\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "import safetensors, safetensors.torch, torch\n"
             "from make_gpt_golden import GPT, GPTConfig\n"
             "f = safetensors.safe_open(sys.argv[2], 'pt')\n"
             "md = f.metadata()\n"
             "assert md['model'].startswith('gpt:layers=2,heads=2,embd=32,block=16,bias=true')\n"
             "m = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=True,\n"
             "                  dropout=0.0, vocab_size=int(md['vocab_size'])))\n"
             "m.load_state_dict(safetensors.torch.load_file(sys.argv[2]), strict=True)\n"
             "print('loaded', len(md['vocab']))\n");
  RunResult py =
      run("/usr/bin/python3", {dir / "load.py", testing::test_data_path("gpt"), dir / "w"});
  if (py.status != 0 && py.err.find("No module named") != std::string::npos)
    GTEST_SKIP() << "PyTorch or safetensors not installed for /usr/bin/python3: " << py.err;
  EXPECT_EQ(py.status, 0) << py.err;
  EXPECT_EQ(py.out, "loaded 24\n");
}

}  // namespace
}  // namespace lockstep::e2e
