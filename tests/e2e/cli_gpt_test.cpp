// End-to-end tests of `lockstep train` with gpt: models on text files (issue 20): the run equals
// the same run made through the library (the window sampler included), deterministic mode is
// bit-identical on 1 and 3 devices, --resume continues bit-identically mid-run (also after
// SIGINT), the files carry the vocabulary and model, and every handled bad input is one line
// with exit status 2. Tiny configs (2 layers, 2 heads, 32 wide, block 16, a few iterations).
#include <signal.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"
#include "lockstep/lockstep.h"
#include "support/helpers.h"
#include "support/tolerance.h"

namespace lockstep::e2e {
namespace {

RunResult ok(const std::vector<std::string>& args) {
  RunResult r = lockstep(args);
  EXPECT_EQ(r.status, 0) << command_text(args) << "\n" << r.err;
  return r;
}

/// 3,000 characters of a few words, seeded (ASCII: 14 distinct characters).
std::string small_text() {
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"};
  std::string s;
  std::uint64_t x = 12345;
  while (s.size() < 3000) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    s += words[(x >> 33) % 9];
    s += (x >> 20) % 7 == 0 ? "\n" : " ";
  }
  return s;
}

const std::string kSpec = "gpt:layers=2,heads=2,embd=32,block=16";

/// A run's flags on `text`: 12 windows a step, eval every 5 steps over 2 batches.
std::vector<std::string> gpt_args(const std::string& text, const std::vector<std::string>& more) {
  return std::vector<std::string>{
             "train",           "--data", "text:" + text, "--model", kSpec,    "--batch-size", "12",
             "--eval-interval", "5",      "--eval-iters", "2",       "--quiet"} +
         more;
}

/// The --metrics lines without what depends on the clock and the devices.
std::vector<nlohmann::json> metrics_without_timing(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const std::string& line : lines_of(read_text(path))) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("tokens_per_second");
    j.erase("devices");
    out.push_back(j);
  }
  return out;
}

TEST(CliGpt, TrainingEqualsTheSameRunThroughTheLibrary) {
  TempDir dir;
  const std::string text = small_text();
  write_text(dir / "t.txt", text);
  ok(gpt_args(dir / "t.txt", {"--max-iters",
                              "6",
                              "--lr",
                              "0.01",
                              "--weight-decay",
                              "0.1",
                              "--betas",
                              "0.9,0.99",
                              "--lr-schedule",
                              "cosine",
                              "--warmup-iters",
                              "2",
                              "--min-lr",
                              "0.001",
                              "--clip-grad-norm",
                              "1",
                              "--seed",
                              "7",
                              "--devices",
                              "cpu:0,cpu:1",
                              "--save",
                              dir / "w"}));

  // The library: prepare.py's vocabulary and split, GPT from the seed, configure_optimizers'
  // groups, get_lr, clipping, and the windows from Generator(seed).
  std::set<char> distinct(text.begin(), text.end());
  const std::vector<char> vocab(distinct.begin(), distinct.end());
  std::vector<std::int64_t> ids;
  for (char c : text) ids.push_back(std::find(vocab.begin(), vocab.end(), c) - vocab.begin());
  ids.resize(static_cast<std::size_t>(static_cast<double>(ids.size()) * 0.9));
  const Tensor train = tensor(std::span<const std::int64_t>(ids));
  nn::GPTConfig config{.block_size = 16,
                       .vocab_size = static_cast<std::int64_t>(vocab.size()),
                       .n_layer = 2,
                       .n_head = 2,
                       .n_embd = 32};
  manual_seed(7);
  auto model = std::make_shared<nn::GPT>(config);
  parallel::DataParallelOptions dp_options;
  dp_options.seed = 7;
  parallel::DataParallel dp(model, testing::cpus(2), std::nullopt, dp_options);
  optim::AdamW opt(optim::weight_decay_groups(*model, 0.1),
                   {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1});
  optim::WarmupCosineLR schedule(opt, 2, 6, 0.001);
  Generator windows(7);
  for (int it = 0; it < 6; ++it) {
    auto [x, y] = data::random_windows(train, 16, 12, windows);
    opt.zero_grad();
    dp.forward_backward(
        x, y, [](const Tensor& logits, const Tensor& t) { return nn::gpt_loss(logits, t); },
        [](const Tensor& t) { return nn::count_targets(t); });
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    schedule.step();
  }
  const safetensors::File saved = safetensors::load_file(dir / "w");
  const StateDict mine = model->state_dict();
  ASSERT_EQ(saved.tensors.size(), mine.size());
  for (const auto& [name, t] : saved.tensors) {
    ASSERT_NE(mine.find(name), nullptr) << name;
    EXPECT_TRUE(testing::BitEqual(t, *mine.find(name))) << name;
  }
}

TEST(CliGpt, DeterministicModeIsBitIdenticalOnOneAndThreeDevices) {
  TempDir dir;
  write_text(dir / "t.txt", small_text());
  for (const std::string devices : {"cpu:0", "cpu:0,cpu:1,cpu:2"})
    ok(gpt_args(dir / "t.txt", {"--max-iters", "10", "--deterministic", "--lr-schedule", "cosine",
                                "--model", kSpec + ",dropout=0.1", "--devices", devices, "--save",
                                dir / devices, "--metrics", dir / (devices + ".m")}));
  ASSERT_FALSE(read_text(dir / "cpu:0").empty());
  EXPECT_EQ(read_text(dir / "cpu:0"), read_text(dir / "cpu:0,cpu:1,cpu:2"));
  const auto one = metrics_without_timing(dir / "cpu:0.m");
  EXPECT_EQ(one.size(), 2u);
  EXPECT_EQ(one, metrics_without_timing(dir / "cpu:0,cpu:1,cpu:2.m"));
}

TEST(CliGpt, ResumeMidRunIsBitIdentical) {
  TempDir dir;
  write_text(dir / "t.txt", small_text());
  // Dropout on two devices (the masks follow the step count), AdamW state, the cosine's position.
  const auto args =
      gpt_args(dir / "t.txt", {"--model", kSpec + ",dropout=0.2,bias=true", "--devices",
                               "cpu:0,cpu:1", "--lr-schedule", "cosine", "--warmup-iters", "3",
                               "--lr-decay-iters", "15", "--clip-grad-norm", "1"});
  ok(args + std::vector<std::string>{"--max-iters", "15", "--save", dir / "whole", "--metrics",
                                     dir / "whole.m"});
  const std::string ck = dir / "ck";
  ok(args +
     std::vector<std::string>{"--max-iters", "7", "--checkpoint-dir", ck, "--metrics", dir / "m"});
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ck)) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"iter-000005.safetensors", "iter-000007.safetensors"}));
  ok(args + std::vector<std::string>{"--max-iters", "15", "--checkpoint-dir", ck, "--resume",
                                     "--save", dir / "resumed", "--metrics", dir / "m"});
  ASSERT_FALSE(read_text(dir / "whole").empty());
  EXPECT_EQ(read_text(dir / "whole"), read_text(dir / "resumed"));
  // Lines of iterations 5, 7 (the first run's end), 10 and 15; 5, 10, 15 as the whole run's.
  auto resumed = metrics_without_timing(dir / "m"), whole = metrics_without_timing(dir / "whole.m");
  ASSERT_EQ(resumed.size(), 4u);
  EXPECT_EQ(resumed[1]["iter"], 7);
  resumed.erase(resumed.begin() + 1);
  EXPECT_EQ(resumed, whole);
  // Other schedule constants are another trajectory: refused.
  expect_error(args + std::vector<std::string>{"--max-iters", "20", "--lr-decay-iters", "20",
                                               "--checkpoint-dir", ck, "--resume"},
               {"--lr-decay-iters=20", "iter-000015.safetensors"});
}

TEST(CliGpt, SigintWritesAnIterationCheckpointAndResumeIsBitIdentical) {
  TempDir dir;
  write_text(dir / "t.txt", small_text());
  const std::vector<std::string> args{"train",
                                      "--data",
                                      "text:" + (dir / "t.txt"),
                                      "--model",
                                      kSpec,
                                      "--batch-size",
                                      "4",
                                      "--eval-interval",
                                      "40",
                                      "--eval-iters",
                                      "1",
                                      "--devices",
                                      "cpu:0,cpu:1"};
  const std::string ck = dir / "ck";
  // Waits for the first evaluation line (iteration 40), then interrupts: mostly between two
  // evaluations (a checkpoint of that iteration), sometimes at one (its checkpoint).
  Child child(kCli,
              args + std::vector<std::string>{"--max-iters", "1000000", "--checkpoint-dir", ck});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (child.out_so_far().find('\n') == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(child.pid(), SIGINT);
  RunResult r = child.wait();
  ASSERT_EQ(r.status, 130) << r.err;
  ASSERT_EQ(lines_of(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("interrupted by SIGINT "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("iteration"), std::string::npos) << r.err;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ck)) files.push_back(e.path().filename());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  const auto f = safetensors::load_file(ck + "/" + files.back());
  const int done = std::stoi(f.metadata.at("global_step"));
  char name[64];
  std::snprintf(name, sizeof name, "iter-%06d.safetensors", done);
  EXPECT_EQ(files.back(), name);
  EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
  const std::string total = std::to_string(done + 3);
  ok(args + std::vector<std::string>{"--max-iters", total, "--checkpoint-dir", ck, "--resume",
                                     "--save", dir / "resumed", "--quiet"});
  ok(args + std::vector<std::string>{"--max-iters", total, "--save", dir / "whole", "--quiet"});
  ASSERT_FALSE(read_text(dir / "whole").empty());
  EXPECT_EQ(read_text(dir / "whole"), read_text(dir / "resumed"));
}

TEST(CliGpt, FilesCarryTheVocabularyAndModelUnderNanoGptNames) {
  TempDir dir;
  write_text(dir / "t.txt", "h\xc3\xa9llo w\xc3\xb6rld, hello world! " + small_text());
  RunResult r = lockstep(
      gpt_args(dir / "t.txt", {"--max-iters", "5", "--checkpoint-dir", dir / "ck", "--save",
                               dir / "w", "--metrics", dir / "m", "--devices", "cpu:0"}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(std::regex_match(
      r.out, std::regex(R"(done: 5 iterations, val_loss [0-9.]+, [0-9.]+ s, tokens/s [0-9]+, )"
                        R"(devices=cpu:0 world_size=1\n)")))
      << r.out;
  for (const std::string file : {dir / "w", dir / "ck/iter-000005.safetensors"}) {
    const auto f = safetensors::load_file(file);
    EXPECT_EQ(f.metadata.at("tokenizer"), "char") << file;
    std::string vocab = f.metadata.at("vocab");
    EXPECT_EQ(vocab.substr(0, 2), "\n ") << file;  // sorted by code point
    EXPECT_NE(vocab.find("\xc3\xa9\xc3\xb6"), std::string::npos) << file;
    EXPECT_EQ(f.metadata.at("model"), kSpec + ",bias=false,dropout=0") << file;
    // 26 letters (the words make a pangram), space, newline, ',', '!', 'é' and 'ö'.
    EXPECT_EQ(f.metadata.at("vocab_size"), "32") << file;
    for (const char* key : {"transformer.wte.weight", "lm_head.weight", "transformer.wpe.weight",
                            "transformer.h.1.mlp.c_proj.weight", "transformer.ln_f.weight"})
      EXPECT_NO_THROW(f.at(key)) << file << " " << key;
  }
  const auto m = nlohmann::json::parse(lines_of(read_text(dir / "m")).at(0));
  for (const char* key :
       {"iter", "train_loss", "val_loss", "tokens_per_second", "lr", "devices", "world_size"})
    EXPECT_TRUE(m.contains(key)) << key;
  EXPECT_EQ(m["iter"], 5);
}

TEST(CliGpt, BytesVocabularyTakesAnyFile) {
  TempDir dir;
  std::string bytes = small_text();
  bytes[100] = '\xff';  // not UTF-8
  write_text(dir / "b.bin", bytes);
  ok({"train", "--data", "text-bytes:" + (dir / "b.bin"), "--model", kSpec, "--max-iters", "2",
      "--eval-iters", "1", "--batch-size", "4", "--quiet", "--save", dir / "w"});
  const auto f = safetensors::load_file(dir / "w");
  EXPECT_EQ(f.metadata.at("tokenizer"), "bytes");
  EXPECT_EQ(f.metadata.at("vocab_size"), "256");
  EXPECT_EQ(f.at("transformer.wte.weight").size(0), 256);
}

TEST(CliGpt, BadTextAndSpecsAreOneLineErrors) {
  TempDir dir;
  write_text(dir / "empty.txt", "");
  write_text(dir / "short.txt", "abcdefghij");
  std::string bad = small_text();
  bad[1234] = '\xc3';  // a lead byte without its continuation
  write_text(dir / "bad.txt", bad);
  write_text(dir / "t.txt", small_text());
  const std::string t = "text:" + (dir / "t.txt");
  auto train = [&](const std::string& data, const std::string& model) {
    return std::vector<std::string>{"train", "--data", data, "--model", model, "--max-iters", "1"};
  };
  expect_error(train("text:" + (dir / "empty.txt"), kSpec), {"empty.txt", "empty file"});
  expect_error(train("text:" + (dir / "short.txt"), kSpec),
               {"short.txt", "training part", "holds 9 characters", "block + 1 = 17"});
  expect_error(train("text:" + (dir / "bad.txt"), kSpec),
               {"bad.txt", "invalid UTF-8 at byte offset 1234", "text-bytes:"});
  expect_error(train("text:" + (dir / "missing.txt"), kSpec), {"missing.txt"});
  expect_usage_error(train(t, "gpt:layers=2,heads=2,embd=32"), {"block missing"});
  expect_usage_error(train(t, kSpec + ",width=3"), {"unknown key 'width'"});
  expect_usage_error(train(t, "gpt:layers=2,heads=3,embd=32,block=16"),
                     {"embd 32 is not a multiple of heads 3"});
  expect_usage_error(train(t, "gpt:layers=0,heads=2,embd=32,block=16"),
                     {"layers must be an integer >= 1, got '0'"});
  expect_usage_error(train(t, kSpec + ",dropout=1.5"), {"dropout must be a number in [0, 1)"});
  expect_usage_error(train(t, kSpec + ",bias=yes"), {"bias must be true or false"});
  expect_error(train(t, kSpec) + std::vector<std::string>{"--epochs", "3"},
               {"--epochs does not apply to gpt: models", "--max-iters"});
  expect_error(train(t, kSpec) + std::vector<std::string>{"--optimizer", "sgd"}, {"sgd"});
  expect_error(train(t, kSpec) + std::vector<std::string>{"--lr-schedule", "step:1:0.5"},
               {"step:1:0.5", "per epoch"});
  expect_error(train(t, kSpec) + std::vector<std::string>{"--warmup-iters", "3"},
               {"--warmup-iters applies to --lr-schedule cosine only"});
  expect_error(
      train(t, kSpec) + std::vector<std::string>{"--lr-schedule", "cosine", "--warmup-iters", "5"},
      {"--lr-decay-iters 1 (--max-iters) must exceed --warmup-iters 5"});
  expect_error({"train", "--max-iters", "3"}, {"--max-iters applies to gpt: models only"});
  expect_error({"train", "--data", t}, {"is a text", "gpt:"});
  expect_error({"train", "--model", kSpec}, {"trains on text", "--data synthetic"});
}

}  // namespace
}  // namespace lockstep::e2e
