#!/usr/bin/env bash
# Installs the Debian 12 packages Lockstep builds with, and nothing else. Idempotent: when every
# package is already installed it changes nothing and does not touch the network; otherwise it
# runs `apt-get update` once and installs only the missing packages, non-interactively.
# Runs as root, or through sudo when not root and sudo is available.
#
#   scripts/install-deps.sh          # install what is missing
#   scripts/install-deps.sh --list   # print the package names and exit
set -euo pipefail

PACKAGES=(
  cmake g++ ninja-build ccache              # toolchain (CMake >= 3.25, C++20)
  libopenblas-dev libopenblas-pthread-dev   # GEMM; CMake links the pthread (thread-safe) build
  libdnnl-dev                               # oneDNN: float32 conv2d (optional: LOCKSTEP_DNNL)
  libgtest-dev googletest                   # tests
  libbenchmark-dev                          # bench/
  libcli11-dev                              # the lockstep CLI
  nlohmann-json3-dev                        # golden test data
  libfmt-dev zlib1g-dev                     # formatting; gzipped IDX files
  dataset-fashion-mnist                     # the main job's data (/usr/share/datasets/fashion-mnist)
  fortunes                                  # the example text of gpt: models (/usr/share/games/fortunes)
  clang-14 libclang-rt-14-dev               # libFuzzer targets of the file readers (scripts/fuzz.sh)
  libopenmpi-dev openmpi-bin                # the mpi ProcessGroup backend and mpirun (tests/mpi)
  iproute2 bc                               # tests/multihost: network namespaces, tc; timings
  python3-dev python3-venv                  # the Python package (python/; its PyPI pins: python/requirements.txt)
)

if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

log() { echo "install-deps: $*" >&2; }

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

if ! command -v dpkg-query >/dev/null 2>&1; then
  log "dpkg-query not found: this script supports Debian/Ubuntu only; install these by hand:"
  log "  ${PACKAGES[*]}"
  exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  log "all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  log "missing packages: ${missing[*]}"
  log "not root and sudo is not available; install them as root with:"
  log "  apt-get update && apt-get install -y ${missing[*]}"
  exit 1
fi

log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
log "done"
