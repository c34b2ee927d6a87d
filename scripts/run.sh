#!/usr/bin/env bash
# The main job: installs missing Debian packages (Fashion-MNIST among them), builds the
# `lockstep` CLI (Release, Ninja, ccache) into build/, then trains on Fashion-MNIST on every
# available device: every GPU where nvidia-smi lists one and the CUDA toolkit is installed
# (configured with -DLOCKSTEP_CUDA=ON; LOCKSTEP_CUDA=OFF in the environment forces a CPU build),
# otherwise one CPU device per usable core:
#
#   scripts/run.sh                  # lockstep train --data fashion-mnist --model cnn
#                                   #   --optimizer adam --lr 0.001 --lr-schedule cosine
#                                   #   --batch-size 64 --epochs 10
#   scripts/run.sh --model mlp:784,256,10 --lr-schedule constant   # the earlier MLP job
#   scripts/run.sh --epochs 3 --devices cpu:0   # extra flags are appended; a repeated flag
#                                               # takes the last value (here: 3 epochs, 1 device)
#   scripts/run.sh --no-sync-bn     # PyTorch's per-device BatchNorm instead of SyncBatchNorm
#   scripts/run.sh --model resnet20 # ResNet-20 (slower: 31M multiply-adds an image, 25x the CNN)
# Any other job: build/lockstep train --help.
#
# Package and build messages go to stderr, so stdout carries only the training output.
# Set LOCKSTEP_BUILD_DIR to build elsewhere.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${LOCKSTEP_BUILD_DIR:-$ROOT/build}"

"$ROOT/scripts/install-deps.sh"

# Reuse the generator of an existing build folder; a new one gets Ninja.
generator=()
[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || generator=(-G Ninja)
cuda=()
if [[ -n "${LOCKSTEP_CUDA:-}" ]]; then
  cuda=(-DLOCKSTEP_CUDA="$LOCKSTEP_CUDA")
elif [[ -x "${CUDACXX:-/usr/local/cuda/bin/nvcc}" ]] && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  cuda=(-DLOCKSTEP_CUDA=ON)
fi
cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" >&2
cmake --build "$BUILD_DIR" --target lockstep >&2

# The job's flags first, the caller's after them: a flag given again takes the caller's value.
# The CNN (`--model cnn`, docs/cli.md "lockstep train: models and weights"): Conv2d(1,16,3,padding=1) BatchNorm2d(16) ReLU
# MaxPool2d(2) Conv2d(16,32,3,padding=1) BatchNorm2d(32) ReLU MaxPool2d(2) Flatten
# Linear(1568,128) ReLU Linear(128,10).
# BatchNorm: no flag needed. With more than one device (or rank) `lockstep train` turns the
# model's BatchNorm layers into SyncBatchNorm by itself (statistics of the whole global batch, so
# the devices train the one-device model; the first output line says which mode runs, e.g.
# "batchnorm: SyncBatchNorm over 2 devices ..."); on one device the two are the same.
# `--no-sync-bn` (appended) gives PyTorch's per-device BatchNorm instead.
exec "$BUILD_DIR/lockstep" train --data fashion-mnist --model cnn --optimizer adam --lr 0.001 \
  --lr-schedule cosine --batch-size 64 --epochs 10 "$@"
