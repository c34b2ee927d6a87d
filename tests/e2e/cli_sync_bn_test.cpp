// End-to-end: `lockstep train --sync-bn / --no-sync-bn` (issue 18) and `--model resnet20`.
// SyncBatchNorm on 2 devices trains the 1-device model (allclose) where PyTorch's per-device
// BatchNorm does not; with --deterministic (SyncBatchNorm automatic) 1, 2 and 3 devices save the
// same bytes; --deterministic with --no-sync-bn exits 2 naming the layer; the header line names
// the mode; a checkpoint records the flag. resnet20 trains one step on tiny 28x28 data, saves
// torchvision's names and evaluates; its --save file loads strictly into docs/cli.md's PyTorch
// class (skipped without PyTorch), which also computes the same evaluation loss, and a file that
// PyTorch wrote is accepted by --init.
#include <algorithm>
#include <cstdlib>

#include "cli_support.h"
#include "lockstep/io/safetensors.h"
#include "support/tolerance.h"

namespace lockstep::e2e {
namespace {

// `train` images and `val` test images of 28x28 pixels (what the cnn preset takes), 10 classes
// (cyclic labels), in the MNIST directory layout.
std::string images_28(const TempDir& dir, std::uint32_t train, std::uint32_t val) {
  const fs::path d = dir.path() / "images";
  fs::create_directories(d);
  write_text(d / "train-images-idx3-ubyte", idx_images(train, 28, 28));
  write_text(d / "train-labels-idx1-ubyte", idx_labels(cyclic_labels(static_cast<int>(train), 10)));
  write_text(d / "t10k-images-idx3-ubyte", idx_images(val, 28, 28));
  write_text(d / "t10k-labels-idx1-ubyte", idx_labels(cyclic_labels(static_cast<int>(val), 10)));
  return "fashion-mnist:" + d.string();
}

StateDict load(const std::string& path) {
  return safetensors::to_state_dict(safetensors::load_file(path));
}

std::string first_line(const std::string& out) {
  const auto lines = lines_of(out);
  return lines.empty() ? "" : lines.front();
}

// 40 images in batches of 20 (shards 8, 8, 4): two steps of the cnn preset.
std::vector<std::string> cnn_run(const std::string& data, const std::string& devices,
                                 const std::string& save) {
  return {"train",        "--data", data,        "--model", "cnn",    "--epochs", "1",
          "--batch-size", "20",     "--devices", devices,   "--save", save};
}

TEST(CliSyncBn, SyncBatchNormOnTwoDevicesTrainsTheOneDeviceModel) {
  TempDir dir;
  const std::string data = images_28(dir, 40, 10);
  RunResult one = lockstep(cnn_run(data, "cpu:0", dir / "one"));
  RunResult sync =
      lockstep(cnn_run(data, "cpu:0,cpu:1", dir / "sync") + std::vector<std::string>{"--sync-bn"});
  RunResult per_device = lockstep(cnn_run(data, "cpu:0,cpu:1", dir / "per_device") +
                                  std::vector<std::string>{"--no-sync-bn"});
  ASSERT_EQ(one.status, 0) << one.err;
  ASSERT_EQ(sync.status, 0) << sync.err;
  ASSERT_EQ(per_device.status, 0) << per_device.err;
  EXPECT_EQ(first_line(one.out),
            "batchnorm: BatchNorm on 1 device (2 layers; the whole batch's statistics)");
  EXPECT_EQ(
      first_line(sync.out),
      "batchnorm: SyncBatchNorm over 2 devices (2 layers; statistics of the whole global batch)");
  EXPECT_EQ(first_line(per_device.out).rfind("batchnorm: BatchNorm per device over 2 devices", 0),
            0u)
      << per_device.out;
  // The same keys either way (PyTorch's SyncBatchNorm has BatchNorm2d's too).
  const StateDict a = load(dir / "one"), s = load(dir / "sync"), p = load(dir / "per_device");
  EXPECT_EQ(s.keys(), a.keys());
  EXPECT_EQ(p.keys(), a.keys());
  EXPECT_NE(read_text(dir / "sync"), read_text(dir / "per_device"));
  bool per_device_differs = false;
  for (const std::string& key : a.keys()) {
    SCOPED_TRACE(key);
    if (a.at(key).dtype() == kInt64) {
      EXPECT_EQ(s.at(key).item(), a.at(key).item());
      continue;
    }
    EXPECT_TRUE(testing::AllClose(s.at(key), a.at(key)));
    if (!testing::AllClose(p.at(key), a.at(key))) per_device_differs = true;
  }
  EXPECT_TRUE(per_device_differs) << "per-device BatchNorm trained the one-device model";
}

TEST(CliSyncBn, DeterministicIsSyncBatchNormAndTheSameBytesOnEveryDeviceCount) {
  TempDir dir;
  const std::string data = images_28(dir, 40, 10);
  std::vector<std::string> files;
  for (const std::string devices : {"cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2"}) {
    SCOPED_TRACE(devices);
    files.push_back(dir / ("w" + std::to_string(files.size())));
    RunResult r = lockstep(cnn_run(data, devices, files.back()) +
                           std::vector<std::string>{"--deterministic"});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string header = first_line(r.out);
    EXPECT_EQ(header.rfind("batchnorm: SyncBatchNorm over ", 0), 0u) << header;
    EXPECT_NE(header.find("--deterministic"), std::string::npos) << header;
  }
  const std::string first = read_text(files[0]);
  EXPECT_FALSE(first.empty());
  for (std::size_t i = 1; i < files.size(); ++i)
    EXPECT_TRUE(read_text(files[i]) == first) << files[i] << " differs from " << files[0];
}

TEST(CliSyncBn, DeterministicWithPerDeviceBatchNormExitsTwoNamingTheLayer) {
  TempDir dir;
  const std::string data = images_28(dir, 40, 10);
  expect_error(cnn_run(data, "cpu:0,cpu:1", dir / "w") +
                   std::vector<std::string>{"--deterministic", "--no-sync-bn"},
               {"deterministic mode", "'1' (BatchNorm2d)", "SyncBatchNorm", "--sync-bn"});
  EXPECT_FALSE(fs::exists(dir / "w"));
  // The last of --sync-bn / --no-sync-bn wins (flags appended to scripts/run.sh's override it).
  RunResult r = lockstep(cnn_run(data, "cpu:0,cpu:1", dir / "w") +
                         std::vector<std::string>{"--deterministic", "--no-sync-bn", "--sync-bn"});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliSyncBn, AModelWithoutBatchNormPrintsNoHeader) {
  // --sync-bn is then a no-op, and the output stays the reference program's lines.
  RunResult r = lockstep({"train", "--epochs", "1", "--sync-bn", "--devices", "cpu:0,cpu:1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("batchnorm"), std::string::npos) << r.out;
  EXPECT_EQ(lines_of(r.out).size(), 2u) << r.out;  // the epoch line and the summary
}

TEST(CliSyncBn, ACheckpointRecordsTheFlagGiven) {
  TempDir dir;
  const std::string data = images_28(dir, 20, 10);
  const std::vector<std::string> common = {
      "train", "--data",    data,          "--model",          "cnn",      "--batch-size",
      "10",    "--devices", "cpu:0,cpu:1", "--checkpoint-dir", dir / "ck", "--quiet"};
  ASSERT_EQ(lockstep(common + std::vector<std::string>{"--epochs", "1", "--no-sync-bn"}).status, 0);
  expect_error(common + std::vector<std::string>{"--epochs", "2", "--resume"},
               {"--resume", "--sync-bn not given (automatic)", "--sync-bn=off"});
  RunResult r =
      lockstep(common + std::vector<std::string>{"--epochs", "2", "--resume", "--no-sync-bn"});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(CliResnet20, TrainsOneStepSavesTorchvisionNamesAndEvaluates) {
  TempDir dir;
  const std::string data = images_28(dir, 4, 10);  // one step of 4 images, 10 to validate
  RunResult r =
      lockstep({"train", "--data", data, "--model", "resnet20", "--epochs", "1", "--batch-size",
                "4", "--devices", "cpu:0,cpu:1", "--save", dir / "w.safetensors"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(first_line(r.out),
            "batchnorm: SyncBatchNorm over 2 devices (21 layers; statistics of the whole global "
            "batch)");
  const StateDict saved = load(dir / "w.safetensors");
  std::int64_t parameters = 0, batchnorms = 0;
  for (const std::string& key : saved.keys()) {
    const auto ends = [&key](const std::string& s) {
      return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
    };
    if (ends(".weight") || ends(".bias")) parameters += saved.at(key).numel();
    if (ends(".num_batches_tracked")) {
      ++batchnorms;
      EXPECT_EQ(saved.at(key).dtype(), kInt64) << key;
      EXPECT_EQ(saved.at(key).item(), 1) << key;
    }
  }
  EXPECT_EQ(parameters, 272186);
  EXPECT_EQ(batchnorms, 21);
  for (const char* key :
       {"conv1.weight", "bn1.running_var", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
        "layer3.0.downsample.1.running_mean", "layer3.2.bn2.bias", "fc.weight", "fc.bias"})
    EXPECT_NE(saved.find(key), nullptr) << key;
  EXPECT_EQ(saved.at("conv1.weight").shape(), (Shape{16, 1, 3, 3}));
  EXPECT_EQ(saved.at("fc.weight").shape(), (Shape{10, 64}));
  RunResult e =
      lockstep({"eval", "--data", data, "--model", "resnet20", "--weights", dir / "w.safetensors"});
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_NE(e.out.find("samples 10"), std::string::npos) << e.out;
}

TEST(CliResnet20, RefusesDataItDoesNotFit) {
  TempDir dir;
  const fs::path d = dir.path() / "four";
  fs::create_directories(d);
  write_text(d / "train-images-idx3-ubyte", idx_images(4, 8, 8));
  write_text(d / "train-labels-idx1-ubyte", idx_labels(cyclic_labels(4, 4)));
  write_text(d / "t10k-images-idx3-ubyte", idx_images(4, 8, 8));
  write_text(d / "t10k-labels-idx1-ubyte", idx_labels(cyclic_labels(4, 4)));
  expect_error(
      {"train", "--data", "fashion-mnist:" + d.string(), "--model", "resnet20", "--epochs", "1"},
      {"--model resnet20", "Linear(64, 10)", "4 classes"});
  write_text(dir / "t.csv", "1,2,3,4,0\n4,3,2,1,1\n");
  expect_error(
      {"train", "--data", "csv:" + (dir / "t.csv"), "--model", "resnet20", "--epochs", "1"},
      {"--model resnet20", "not images"});
  expect_error(
      {"train", "--data", "fashion-mnist:" + d.string(), "--model", "resnet20", "--dropout", "0.5"},
      {"--dropout", "resnet20"});
}

TEST(CliResnet20PyTorch, SavedFilesLoadStrictlyIntoTheReadmeResNet20) {
  // docs/cli.md's PyTorch class (the same text) loads ours strictly, also after PyTorch's
  // convert_sync_batchnorm, and computes the evaluation loss `lockstep eval` prints; a file it
  // writes is accepted by --init. Python: $LOCKSTEP_TORCH_PYTHON, else /usr/bin/python3; skipped
  // without PyTorch.
  const char* env = std::getenv("LOCKSTEP_TORCH_PYTHON");
  const std::string python = env ? env : "/usr/bin/python3";
  if (!fs::exists(python)) GTEST_SKIP() << python << " not installed";
  TempDir dir;
  const std::string data = images_28(dir, 4, 10);
  const std::vector<std::string> train = {"train",    "--data",    data,          "--model",
                                          "resnet20", "--epochs",  "1",           "--batch-size",
                                          "4",        "--devices", "cpu:0,cpu:1", "--quiet"};
  // A large step, so that the evaluation loss is far from ln(10) and tells forwards apart.
  ASSERT_EQ(
      lockstep(train + std::vector<std::string>{"--lr", "0.5", "--save", dir / "ours"}).status, 0);
  write_text(
      dir / "interop.py",
      "import sys, torch, torch.nn as nn, torch.nn.functional as F\n"
      "from safetensors.torch import load_file, save_file\n"
      "\n"
      "class BasicBlock(nn.Module):\n"
      "    def __init__(self, inplanes, planes, stride=1):\n"
      "        super().__init__()\n"
      "        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)\n"
      "        self.bn1 = nn.BatchNorm2d(planes)\n"
      "        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)\n"
      "        self.bn2 = nn.BatchNorm2d(planes)\n"
      "        self.downsample = None\n"
      "        if stride != 1 or inplanes != planes:\n"
      "            self.downsample = nn.Sequential(\n"
      "                nn.Conv2d(inplanes, planes, 1, stride, bias=False), "
      "nn.BatchNorm2d(planes))\n"
      "\n"
      "    def forward(self, x):\n"
      "        out = F.relu(self.bn1(self.conv1(x)))\n"
      "        out = self.bn2(self.conv2(out))\n"
      "        return F.relu(out + (x if self.downsample is None else self.downsample(x)))\n"
      "\n"
      "class ResNet20(nn.Module):\n"
      "    def __init__(self, in_channels=1, num_classes=10):\n"
      "        super().__init__()\n"
      "        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False)\n"
      "        self.bn1 = nn.BatchNorm2d(16)\n"
      "        self.layer1 = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 16), BasicBlock(16, "
      "16))\n"
      "        self.layer2 = nn.Sequential(BasicBlock(16, 32, 2), BasicBlock(32, 32), "
      "BasicBlock(32, 32))\n"
      "        self.layer3 = nn.Sequential(BasicBlock(32, 64, 2), BasicBlock(64, 64), "
      "BasicBlock(64, 64))\n"
      "        self.fc = nn.Linear(64, num_classes)\n"
      "\n"
      "    def forward(self, x):\n"
      "        x = F.relu(self.bn1(self.conv1(x)))\n"
      "        x = self.layer3(self.layer2(self.layer1(x)))\n"
      "        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))\n"
      "\n"
      "def idx(path, header):\n"
      "    return torch.frombuffer(bytearray(open(path, 'rb').read()[header:]), "
      "dtype=torch.uint8)\n"
      "\n"
      "state = load_file(sys.argv[1])\n"
      "m = ResNet20()\n"
      "assert sum(p.numel() for p in m.parameters()) == 272186\n"
      "m.load_state_dict(state, strict=True)\n"
      "nn.SyncBatchNorm.convert_sync_batchnorm(ResNet20()).load_state_dict(state, strict=True)\n"
      "x = idx(sys.argv[2] + '/t10k-images-idx3-ubyte', 16).float().div(255).reshape(-1, 1, 28, "
      "28)\n"
      "y = idx(sys.argv[2] + '/t10k-labels-idx1-ubyte', 8).long()\n"
      "m.eval()\n"
      "with torch.no_grad():\n"
      "    loss = F.cross_entropy(m(x), y).item()\n"
      "torch.manual_seed(5)\n"
      "save_file(ResNet20().state_dict(), sys.argv[3])\n"
      "print(int(m.bn1.num_batches_tracked), repr(loss))\n");
  const std::string images = data.substr(std::string("fashion-mnist:").size());
  RunResult py = run(python, {dir / "interop.py", dir / "ours", images, dir / "theirs"});
  if (py.status != 0 && py.err.find("No module named") != std::string::npos)
    GTEST_SKIP() << "PyTorch or safetensors not installed for " << python << ": " << py.err;
  ASSERT_EQ(py.status, 0) << py.err;
  std::istringstream fields(py.out);
  int tracked = 0;
  double torch_loss = 0.0;
  fields >> tracked >> torch_loss;
  EXPECT_EQ(tracked, 1);  // one step
  RunResult e =
      lockstep({"eval", "--data", data, "--model", "resnet20", "--weights", dir / "ours"});
  ASSERT_EQ(e.status, 0) << e.err;
  double our_loss = -1.0;
  ASSERT_EQ(std::sscanf(e.out.c_str(), "loss %lf", &our_loss), 1) << e.out;
  // `lockstep eval` prints 6 decimals.
  EXPECT_NEAR(our_loss, torch_loss, 1e-6 + 1e-5 * std::abs(torch_loss)) << e.out << py.out;
  EXPECT_EQ(lockstep(train + std::vector<std::string>{"--init", dir / "theirs"}).status, 0);
}

}  // namespace
}  // namespace lockstep::e2e
