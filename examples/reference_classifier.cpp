// The reference program (shared/reference/reference_program.py) in C++, line for line:
// 1000x10 random data, 800/200 split, Linear(10,5)-ReLU-Linear(5,2) wrapped in DataParallel over
// all available devices, CrossEntropyLoss, SGD lr 0.01, batch 32, 10 epochs, validation loss
// after each epoch.
//   reference_classifier                  # Lockstep's default generator (Philox)
//   reference_classifier --torch-seed 0   # PyTorch's generator after torch.manual_seed(0): the
//                                         # reference program with that line prints the same losses
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/lockstep.h"

using namespace lockstep;

// 定义神经网络模型 (the model)
struct NeuralNetwork : nn::Cloneable<NeuralNetwork> {
  std::shared_ptr<nn::Linear> fc1, fc2;

  NeuralNetwork() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(10, 5));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(5, 2));
  }

  Tensor forward(const Tensor& input) override {
    Tensor x = relu(fc1->forward(input));
    x = fc2->forward(x);
    return x;
  }
};

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--torch-seed") {
    char* end = nullptr;
    errno = 0;
    const unsigned long long seed = std::strtoull(argv[2], &end, 10);
    if (end == argv[2] || *end != '\0' || argv[2][0] == '-' || errno == ERANGE) {
      std::fprintf(stderr,
                   "reference_classifier: --torch-seed takes an integer in [0, 2^64), got '%s'\n",
                   argv[2]);
      return 2;
    }
    default_generator().set_engine(Generator::Engine::MT19937);
    manual_seed(seed);
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: reference_classifier [--torch-seed S]\n");
    return 2;
  }

  // 创建虚拟数据集 (random data)
  Tensor X = randn({1000, 10});
  Tensor y = randint(0, 2, {1000});

  // 将数据集分割为训练集和验证集 (first 800 rows train, last 200 validate)
  Tensor X_train = X.narrow(0, 0, 800), X_val = X.narrow(0, 800, 200);
  Tensor y_train = y.narrow(0, 0, 800), y_val = y.narrow(0, 800, 200);

  // 实例化模型 (the model)
  auto network = std::make_shared<NeuralNetwork>();

  // 使用DataParallel包装模型 (replicated on every available device: each GPU, else each core)
  auto model = std::make_shared<nn::DataParallel>(network);

  // 定义损失函数和优化器 (loss and optimizer)
  nn::CrossEntropyLoss criterion;
  optim::SGD optimizer(model->parameters(), {.lr = 0.01});

  // 将数据封装为DataLoader (batches of 32, in order)
  auto train_dataset = std::make_shared<data::TensorDataset>(X_train, y_train);
  data::DataLoader train_loader(train_dataset, {.batch_size = 32});

  // 模型训练 (training)
  for (int epoch = 0; epoch < 10; ++epoch) {
    model->train();
    for (const auto& [batch_X, batch_y] : train_loader) {
      optimizer.zero_grad();
      Tensor outputs = model->forward(batch_X);
      Tensor loss = criterion(outputs, batch_y);
      loss.backward();
      optimizer.step();
    }
    // 在验证集上评估模型性能 (validation loss over all 200 rows)
    model->eval();
    no_grad guard;
    Tensor val_outputs = model->forward(X_val);
    Tensor val_loss = criterion(val_outputs, y_val);
    std::printf("Epoch %d, Validation Loss: %.4f\n", epoch + 1, val_loss.item());
  }
  return 0;
}
