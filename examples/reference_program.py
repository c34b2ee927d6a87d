# The reference program (../shared/reference/reference_program.py) with only its five import lines
# changed: it runs on Lockstep's C++ engine, nn.DataParallel over one CPU worker per core.
#   PYTHONPATH=build/python .venv/bin/python examples/reference_program.py
import lockstep as torch
import lockstep.nn as nn
import lockstep.optim as optim
import lockstep.nn.functional as F
from lockstep.utils.data import DataLoader, TensorDataset
import numpy as np

# 创建虚拟数据集
X = torch.randn(1000, 10)
y = torch.randint(0, 2, (1000,))

# 将数据集分割为训练集和验证集
X_train, X_val = X[:800], X[800:]
y_train, y_val = y[:800], y[800:]

# 定义神经网络模型
class NeuralNetwork(nn.Module):
    def __init__(self):
        super(NeuralNetwork, self).__init__()
        self.fc1 = nn.Linear(10, 5)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return x

# 实例化模型并将模型移到GPU上
model = NeuralNetwork()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = model.to(device)

# 使用DataParallel包装模型
model = nn.DataParallel(model)

# 定义损失函数和优化器
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(model.parameters(), lr=0.01)

# 将数据转移到GPU上
X_train, y_train = X_train.to(device), y_train.to(device)
X_val, y_val = X_val.to(device), y_val.to(device)

# 将数据封装为DataLoader
train_dataset = TensorDataset(X_train, y_train)
train_loader = DataLoader(train_dataset, batch_size=32)

# 模型训练
for epoch in range(10):
    model.train()
    for batch_X, batch_y in train_loader:
        optimizer.zero_grad()
        outputs = model(batch_X)
        loss = criterion(outputs, batch_y)
        loss.backward()
        optimizer.step()
    # 在验证集上评估模型性能
    model.eval()
    val_outputs = model(X_val)
    val_loss = criterion(val_outputs, y_val)
    print(f"Epoch {epoch+1}, Validation Loss: {val_loss.item():.4f}")
