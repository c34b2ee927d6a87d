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
# The list: what gpu-check.sh builds (test_cuda and the lockstep CLI, -DLOCKSTEP_BUILD_BENCH=OFF,
# -DLOCKSTEP_MPI=OFF) needs beyond the CUDA toolkit, glibc and libstdc++: OpenBLAS (pthread
# build) with its gfortran/quadmath runtime, GoogleTest, nlohmann-json, CLI11 and zlib. Not in
# it: Google Benchmark and MPI (not built there), the libopenblas0/libopenblas-dev metapackages
# (no files), -doc packages. About 14 MiB; it travels with the source (64 MiB in all).
set -euo pipefail

if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
DIR="$1"

PACKAGES=(
  libopenblas-pthread-dev libopenblas0-pthread                              # GEMM (pthread build)
  libgfortran5 libquadmath0                                                 # OpenBLAS's runtime
  libgtest-dev                                                              # tests (libgtest.a + CMake config)
  nlohmann-json3-dev                                                        # safetensors / golden data
  libcli11-dev                                                              # the lockstep CLI
  zlib1g-dev zlib1g                                                         # gzipped IDX files
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
if ! apt-get download -q "${PACKAGES[@]}" >&2; then
  log "FAILED: apt-get download exited non-zero (network? mirror?); $DIR is incomplete"
  exit 1
fi
: > MANIFEST
shopt -s nullglob
for pkg in "${PACKAGES[@]}"; do
  debs=("./${pkg}_"*"_$arch.deb" "./${pkg}_"*_all.deb)
  [[ ${#debs[@]} -gt 0 ]] || { log "FAILED: no .deb for $pkg in $DIR after apt-get download"; exit 1; }
done
for deb in ./*.deb; do
  printf '%s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
    "${deb#./}" >> MANIFEST
done
log "done: $(wc -l < MANIFEST) files, $(du -sh . | cut -f1) (MANIFEST lists them)"
