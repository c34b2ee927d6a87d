// A small CNN with SyncBatchNorm trained data-parallel on several CPU devices (or GPUs): each
// device runs a replica on its slice of every batch, BatchNorm normalizes with the statistics of
// the whole batch (nn::convert_sync_batchnorm), and the gradients are all-reduced while backward
// runs. Trains on Fashion-MNIST when --data names its directory, else on a small built-in
// synthetic set (10 classes of noisy 16x16 patterns); prints the mean train loss of each epoch
// and, at the end, the accuracy on held-out images.
//   cnn_sync_bn                                         # every CPU core, synthetic images
//   cnn_sync_bn --data /usr/share/datasets/fashion-mnist --epochs 2
//   cnn_sync_bn --devices cpu:0 --deterministic         # these two print the same losses, bit
//   cnn_sync_bn --devices cpu:0,cpu:1 --deterministic   # for bit (any device count)
#include <cstdio>
#include <string>

#include "flags.h"
#include "lockstep/lockstep.h"

using namespace lockstep;

// Conv-BN-ReLU-pool twice, then a linear classifier over the pooled [16, H/4, W/4] features.
std::shared_ptr<nn::Sequential> make_cnn(std::int64_t height, std::int64_t width) {
  auto cnn = std::make_shared<nn::Sequential>();
  for (auto [in, out] : {std::pair{1, 8}, std::pair{8, 16}}) {
    cnn->push_back(std::make_shared<nn::Conv2d>(in, out, 3, 1, 1));
    cnn->push_back(std::make_shared<nn::BatchNorm2d>(out));
    cnn->push_back(std::make_shared<nn::ReLU>());
    cnn->push_back(std::make_shared<nn::MaxPool2d>(2));
  }
  cnn->push_back(std::make_shared<nn::Flatten>());
  cnn->push_back(std::make_shared<nn::Linear>(16 * (height / 4) * (width / 4), 10));
  return cnn;
}

// Images [N, 1, H, W] and labels [N]: Fashion-MNIST's, or each class's fixed pattern plus noise.
data::TrainTest load_images(const std::string& dir) {
  Generator gen(0);
  Tensor patterns = randn({10, 16 * 16}, {}, &gen);
  auto make = [&](std::int64_t n) {
    Tensor labels = randint(0, 10, {n}, kInt64, &gen);
    Tensor images = index_select(patterns, 0, labels) + randn({n, 16 * 16}, {}, &gen) * 1.5;
    return data::LabeledData{images, labels, {16, 16}};
  };
  data::TrainTest d =
      dir.empty() ? data::TrainTest{make(512), make(256)} : data::load_mnist_dir(dir);
  for (data::LabeledData* part : {&d.train, &d.test})  // rows of pixels -> one-channel images
    part->features =
        part->features.reshape({part->labels.size(0), 1, part->image_size[0], part->image_size[1]});
  return d;
}

int main(int argc, char** argv) {
  examples::Flags flags{
      "cnn_sync_bn",
      "usage: cnn_sync_bn [--data DIR] [--devices LIST] [--epochs N] [--deterministic]",
      {{"--data", ""}, {"--devices", ""}, {"--epochs", "3"}},
      {"--deterministic"}};
  flags.parse(argc, argv, 1);
  const int epochs = flags.positive("--epochs");
  const std::string dir = flags.values["--data"], devices = flags.values["--devices"];
  parallel::DataParallelOptions options;
  options.deterministic = flags.on.count("--deterministic") > 0;
  try {
    const data::TrainTest images = load_images(dir);
    manual_seed(0);
    auto model = make_cnn(images.train.image_size[0], images.train.image_size[1]);
    nn::convert_sync_batchnorm(model);  // before wrapping: the replicas are clones of the model
    nn::DataParallel dp(
        model, devices.empty() ? parallel::default_devices() : parallel::parse_devices(devices),
        std::nullopt, options);
    auto optimizer = std::make_shared<optim::SGD>(dp.parameters(),
                                                  optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    nn::CrossEntropyLoss criterion;
    data::DataLoader loader(
        std::make_shared<data::TensorDataset>(images.train.features, images.train.labels),
        {.batch_size = 64, .shuffle = true, .seed = 0});
    optim::CosineAnnealingLR scheduler(*optimizer, epochs * loader.size());  // stepped per batch
    std::printf("devices: %zu, training images: %s\n", dp.device_ids().size(),
                images.train.features.shape().str().c_str());

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      dp.train();
      double sum = 0;
      for (const auto& [x, y] : loader) {
        optimizer->zero_grad();
        Tensor loss = dp.forward_backward(x, y, criterion);  // forward, backward, all-reduce
        optimizer->step();
        scheduler.step();
        sum += loss.item();
      }
      std::printf("epoch %d train loss %.7f\n", epoch, sum / static_cast<double>(loader.size()));
    }

    dp.eval();  // the running statistics normalize now
    no_grad guard;
    double correct = 0;
    data::DataLoader test(
        std::make_shared<data::TensorDataset>(images.test.features, images.test.labels),
        {.batch_size = 1000});
    for (const auto& [x, y] : test) {
      const Tensor predicted = dp.forward(x).argmax(1);  // on the first listed device
      correct += eq(predicted, y.to(predicted.device())).to(kFloat64).sum().item();
    }
    std::printf("test accuracy %.4f\n", correct / static_cast<double>(images.test.labels.size(0)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn_sync_bn: %s\n", e.what());
    return 1;
  }
  return 0;
}
