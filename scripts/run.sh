#!/usr/bin/env bash
# The main job: installs missing Debian packages, builds the `lockstep` CLI (Release, Ninja,
# ccache) into build/, then runs `lockstep train` with any arguments given here, e.g.
#
#   scripts/run.sh                  # the reference workload, 10 epochs
#   scripts/run.sh --epochs 3 --lr 0.05
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
cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$BUILD_DIR" --target lockstep >&2

exec "$BUILD_DIR/lockstep" train "$@"
