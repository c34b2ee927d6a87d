// DistributedDataParallel under mpirun: one process per rank, each reading its own share of the
// data (DistributedSampler) and training the same model; the gradients are all-reduced over the
// MPI process group while backward runs, so every rank takes the same step, the gradient of the
// mean loss over the global batch. A small classifier (an MLP) learns a random linear teacher's
// labels; rank 0 prints the loss of each epoch (the mean over the global batches, the same on
// every rank) and each rank's share of the last step's loss; every rank prints its final check.
//   mpirun -np 2 ddp                             # as root: mpirun --allow-run-as-root ...
//   mpirun -np 4 --oversubscribe ddp --epochs 5
//   ddp                                          # one rank: the same losses, to rounding
#include <cstdio>
#include <string>

#include "flags.h"
#include "lockstep/lockstep.h"

using namespace lockstep;

int main(int argc, char** argv) {
  examples::Flags flags{"ddp", "usage: [mpirun -np N] ddp [--epochs N]", {{"--epochs", "3"}}, {}};
  flags.parse(argc, argv, 1);
  const int epochs = flags.positive("--epochs");
  int rank = 0;
  try {
    // The group of every rank mpirun started (or this process alone).
    auto group = dist::launched_by_mpi() ? dist::init_mpi() : dist::new_thread_group(1)[0];
    rank = group->rank();
    const int world = group->size();

    // Every rank makes the same data set (the same seed); the sampler gives rank r the samples
    // r, r + world, r + 2·world, ... of each epoch's permutation.
    Generator gen(0);
    Tensor x = randn({2048, 20}, {}, &gen);
    Tensor y = matmul(x, randn({20, 4}, {}, &gen)).argmax(1);
    auto sampler = std::make_shared<data::DistributedSampler>(2048, world, rank, true, 0);
    data::DataLoader loader(std::make_shared<data::TensorDataset>(x, y), sampler,
                            {.batch_size = 64 / world});  // a global batch of 64

    // Every rank builds the model; DistributedDataParallel broadcasts rank 0's parameters.
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(20, 64));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Linear>(64, 4));
    parallel::DistributedDataParallel ddp(model, group);
    auto optimizer = std::make_shared<optim::SGD>(ddp.parameters(),
                                                  optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    optim::CosineAnnealingLR scheduler(*optimizer, epochs * loader.size());  // stepped per batch
    nn::CrossEntropyLoss criterion;
    if (rank == 0)
      std::printf("ranks: %d, a global batch of 64 (%d per rank)\n", world, 64 / world);

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      sampler->set_epoch(epoch);  // a new permutation each epoch, the same on every rank
      double sum = 0;
      for (const auto& [xb, yb] : loader) {
        optimizer->zero_grad();
        Tensor loss = ddp.forward_backward(xb, yb, criterion);  // the global batch's mean loss
        optimizer->step();
        scheduler.step();
        sum += loss.item();
      }
      if (rank == 0) {
        std::printf("epoch %d loss %.6f (last step's shares by rank:", epoch,
                    sum / double(loader.size()));
        for (double share : ddp.rank_losses()) std::printf(" %.4f", share);
        std::printf(")\n");
      }
    }

    // Every rank holds the same parameters, bit for bit: compare them with rank 0's.
    std::vector<Tensor> flat;
    for (const Tensor& p : ddp.parameters()) flat.push_back(p.detach().flatten());
    Tensor mine = cat(flat), rank0 = mine.clone();
    group->broadcast(rank0, 0);
    const bool same = eq(mine, rank0).to(kFloat64).sum().item() == double(mine.numel());
    std::printf("rank %d: parameters %s rank 0's\n", rank,
                same ? "identical to" : "DIFFERENT from");
    dist::finalize_mpi();
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp: rank %d: %s\n", rank, e.what());
    return 1;
  }
}
