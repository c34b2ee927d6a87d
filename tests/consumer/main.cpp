// The consumer project's program (tests/consumer/CMakeLists.txt): fits y = x·w + 0.5 with a
// Linear(4, 1) wrapped in DataParallel, batches from a DataLoader, MSELoss and SGD, so that it
// links every layer from parallel down to core. Prints the loss of each epoch; exits 1 unless the
// last loss is finite and below a tenth of the first.
#include <cmath>
#include <cstdio>
#include <memory>

#include "lockstep/lockstep.h"

using namespace lockstep;

int main() {
  manual_seed(0);
  Tensor x = randn({64, 4});
  Tensor w = tensor(std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}, {4, 1});
  Tensor y = x.matmul(w) + 0.5;

  auto model = std::make_shared<nn::DataParallel>(std::make_shared<nn::Linear>(4, 1));
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  nn::MSELoss criterion;
  data::DataLoader loader(std::make_shared<data::TensorDataset>(x, y), {.batch_size = 16});

  double first = 0, last = 0;
  for (int epoch = 1; epoch <= 5; ++epoch) {
    double total = 0;
    int batches = 0;
    for (const auto& [batch_x, batch_y] : loader) {
      optimizer.zero_grad();
      Tensor loss = criterion(model->forward(batch_x), batch_y);
      loss.backward();
      optimizer.step();
      total += loss.item();
      ++batches;
    }
    last = total / batches;
    if (epoch == 1) first = last;
    std::printf("epoch %d loss %.6f\n", epoch, last);
  }
  if (!std::isfinite(last) || last >= first / 10) {
    std::printf("consumer: the loss did not fall from %.6f to below a tenth (%.6f)\n", first, last);
    return 1;
  }
  std::printf("consumer: trained, loss %.6f -> %.6f\n", first, last);
  return 0;
}
