// nanoGPT's GPT (a tiny config) trained on a text file, one token per character, data-parallel
// over every CPU core (or the devices listed); the step is nanoGPT's: random windows of the text,
// forward and backward with the gradients all-reduced, gradient clipping at 1.0, AdamW with
// weight decay on the matrices, warmup then cosine decay of the learning rate. Prints the train
// loss every 10 iterations and then a greedy sample (the most likely next character, each time)
// continuing the text's first characters.
//   gpt_text input.txt    # e.g. karpathy/char-rnn:data/tinyshakespeare/input.txt
//   gpt_text input.txt --iters 500 --devices cpu:0,cpu:1
// The vocabulary is the file's distinct bytes (for ASCII text, the character vocabulary of
// karpathy/nanoGPT:data/shakespeare_char/prepare.py); `lockstep train --data text:FILE` (the CLI)
// decodes UTF-8 too.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "flags.h"
#include "lockstep/lockstep.h"

using namespace lockstep;

int main(int argc, char** argv) {
  examples::Flags flags{"gpt_text",
                        "usage: gpt_text FILE [--iters N] [--devices LIST]",
                        {{"--iters", "100"}, {"--devices", ""}},
                        {}};
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "%s\n", flags.usage.c_str());
    return 2;
  }
  flags.parse(argc, argv, 2);
  const int iters = flags.positive("--iters");
  const std::string devices = flags.values["--devices"];
  std::ifstream file(argv[1], std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  const std::string text = contents.str();
  if (!file || text.empty()) {
    std::fprintf(stderr, "gpt_text: cannot read '%s', or it is empty\n", argv[1]);
    return 1;
  }
  constexpr std::size_t kBlock = 32;  // the model's context (config.block_size below)
  if (text.size() <= kBlock) {
    std::fprintf(stderr, "gpt_text: '%s' holds %zu bytes; a training window needs %zu\n", argv[1],
                 text.size(), kBlock + 1);
    return 1;
  }
  try {
    // The vocabulary: the distinct bytes in increasing order; token = index in it.
    std::string vocab;
    for (int c = 0; c < 256; ++c)
      if (text.find(static_cast<char>(c)) != std::string::npos) vocab += static_cast<char>(c);
    std::vector<std::int64_t> ids;
    for (char c : text) ids.push_back(static_cast<std::int64_t>(vocab.find(c)));
    const Tensor tokens = tensor(std::span<const std::int64_t>(ids));

    manual_seed(1337);
    nn::GPTConfig config{.block_size = kBlock, .n_layer = 2, .n_head = 2, .n_embd = 48};
    config.vocab_size = static_cast<std::int64_t>(vocab.size());
    auto model = std::make_shared<nn::GPT>(config);
    nn::DataParallel dp(
        model, devices.empty() ? parallel::default_devices() : parallel::parse_devices(devices));
    auto optimizer = optim::configure_optimizers(*model, 0.1, 6e-3, {0.9, 0.99});
    optim::WarmupCosineLR scheduler(*optimizer, iters / 10, iters, 6e-4);
    auto loss_fn = [](const Tensor& logits, const Tensor& y) { return nn::gpt_loss(logits, y); };
    auto count = [](const Tensor& y) { return nn::count_targets(y); };
    std::printf("%zu characters, vocabulary %zu, %lld parameters, devices: %zu\n", text.size(),
                vocab.size(), static_cast<long long>(model->get_num_params()),
                dp.device_ids().size());

    Generator batches(0);
    for (int it = 0; it <= iters; ++it) {
      auto [x, y] = data::random_windows(tokens, model->config.block_size, 16, batches);
      optimizer->zero_grad();
      Tensor loss = dp.forward_backward(x, y, loss_fn, count);  // forward, backward, all-reduce
      nn::utils::clip_grad_norm_(dp.parameters(), 1.0);
      optimizer->step();
      scheduler.step();
      if (it % 10 == 0 || it == iters) std::printf("iter %d train loss %.4f\n", it, loss.item());
    }

    // Greedy decoding from the text's first characters (nanoGPT's generate at temperature -> 0).
    dp.eval();
    no_grad guard;
    std::vector<std::int64_t> context(ids.begin(),
                                      ids.begin() + std::min<std::size_t>(ids.size(), 4));
    for (int n = 0; n < 80; ++n) {
      const std::size_t t = std::min<std::size_t>(context.size(), model->config.block_size);
      std::vector<std::int64_t> window(context.end() - static_cast<std::ptrdiff_t>(t),
                                       context.end());
      Tensor logits =
          model->forward(tensor(std::span<const std::int64_t>(window), {1, std::int64_t(t)}));
      context.push_back(
          logits.narrow(1, std::int64_t(t) - 1, 1).flatten().argmax(0).item<std::int64_t>());
    }
    std::string sample;
    for (std::int64_t id : context) sample += vocab[static_cast<std::size_t>(id)];
    std::printf("sample: %s\n", sample.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_text: %s\n", e.what());
    return 1;
  }
  return 0;
}
