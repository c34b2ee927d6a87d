# The reference program (../shared/reference/reference_program.py) as a timed run of EPOCHS
# epochs: the same data sizes, model, DataParallel wrapper, CrossEntropyLoss, SGD(lr=0.01),
# DataLoader(batch_size=32) and per-epoch validation, printing only the wall time of the whole
# run after `import torch` (seconds). bench/compare_cli_step.sh runs it for two run lengths, so
# start-up and data creation cancel out.
#   python3 bench/pytorch_reference_steps.py EPOCHS THREADS
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

epochs, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
start = time.perf_counter()
X = torch.randn(1000, 10)
y = torch.randint(0, 2, (1000,))
X_train, X_val = X[:800], X[800:]
y_train, y_val = y[:800], y[800:]


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 5)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


model = nn.DataParallel(NeuralNetwork())
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(model.parameters(), lr=0.01)
train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=32)
for epoch in range(epochs):
    model.train()
    for batch_X, batch_y in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(batch_X), batch_y)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val_loss = criterion(model(X_val), y_val).item()
print(f"{time.perf_counter() - start:.6f}")
