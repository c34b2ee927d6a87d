#!/usr/bin/env bash
# Downloads the Debian packages that scripts/gpu-check.sh needs to configure and build Lockstep
# with CUDA on a machine that has the CUDA toolkit, CMake and a C++ compiler but no Debian
# development packages and no network. Run it on a Debian 12 machine (no root needed; `apt-get
# download` fetches exactly the named packages, not their dependencies), then copy DIR to the
# GPU machine and run `scripts/gpu-check.sh --deps DIR --out LOGS`.
#
#   scripts/fetch-gpu-deps.sh DIR
#
# DIR gets the .deb files and MANIFEST (package, version, file), and is created if missing.
# The list: the build dependencies of the CUDA configuration from scripts/install-deps.sh
# (OpenBLAS pthread, GoogleTest, nlohmann-json, CLI11, zlib, Google Benchmark) and the runtime
# libraries the test and benchmark binaries load (OpenBLAS, gfortran, benchmark, zlib).
set -euo pipefail

if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
DIR="$1"

PACKAGES=(
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0  # GEMM (pthread build)
  libgfortran5 libquadmath0                                                 # OpenBLAS's runtime
  libgtest-dev                                                              # tests (libgtest.a + CMake config)
  nlohmann-json3-dev                                                        # safetensors / golden data
  libcli11-dev                                                              # the lockstep CLI
  zlib1g-dev zlib1g                                                         # gzipped IDX files
  libbenchmark-dev libbenchmark1debian                                      # bench/
)

log() { echo "fetch-gpu-deps: $*" >&2; }

command -v apt-get >/dev/null 2>&1 || { log "apt-get not found: run this on Debian 12"; exit 1; }
arch=$(dpkg --print-architecture)
mkdir -p "$DIR"
cd "$DIR"
# A package that apt does not know usually means stale lists: say how to refresh them.
missing=()
for pkg in "${PACKAGES[@]}"; do
  apt-cache show "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "apt does not know: ${missing[*]} (run 'apt-get update' as root first)"
  exit 1
fi
log "downloading ${#PACKAGES[@]} packages ($arch) into $DIR"
apt-get download -q "${PACKAGES[@]}" >&2
: > MANIFEST
for deb in ./*.deb; do
  printf '%s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
    "${deb#./}" >> MANIFEST
done
log "done: $(wc -l < MANIFEST) files, $(du -sh . | cut -f1) (MANIFEST lists them)"
