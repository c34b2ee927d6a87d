#!/usr/bin/env bash
# Builds Lockstep with CUDA (-DLOCKSTEP_CUDA=ON), runs the GPU tests (`ctest -L cuda`) and the GPU
# benchmarks (bench_cuda next to bench/pytorch_cuda.py, compared by bench/compare_cuda.py; then
# nanoGPT's GPT-2 124M training step, bench/bench_gpt next to bench/pytorch_gpt.py, a few steps
# each) and writes every log into DIR; meant to finish well under 8 minutes on one H200 with 16
# cores.
# Works without network and without Debian development packages: when the build dependencies
# are not installed, the .deb files from scripts/fetch-gpu-deps.sh are unpacked (dpkg-deb -x, or
# Python where there is no dpkg) into a private prefix (DIR/prefix) that CMake and the loader are
# pointed at.
#
#   scripts/gpu-check.sh --out DIR [--deps DEBS] [--build BUILD] [--jobs N] [--force-prefix]
#
#   --out DIR     logs: env.txt (nvidia-smi, nvcc, cmake), configure.log, build.log,
#                 ctest.log (verbose, every test's output), ctest-junit.xml, bench-lockstep.jsonl,
#                 bench-pytorch.jsonl (+ .log), bench-compare.md (the side-by-side table),
#                 bench-gpt-lockstep.log, bench-gpt-pytorch.log (one RESULT line each), summary.txt
#   --deps DEBS   folder of .deb files (default: $LOCKSTEP_GPU_DEPS, else gpu-deps/ in the repo)
#   --build DIR   build folder (default: build-gpu/ in the repo)
#   --jobs N      parallel build jobs (default: nproc)
#   --force-prefix  use the private prefix even where the system has the development packages
#                 (to test that path on a Debian machine; also LOCKSTEP_GPU_FORCE_PREFIX=1)
#
# Needs: the CUDA toolkit (/usr/local/cuda or CUDACXX), NCCL (beside the toolkit, in the system,
# PyTorch's nvidia-nccl pip package, or NCCL_LIBRARY + NCCL_INCLUDE_DIR in the environment),
# CMake >= 3.25, a C++20 compiler; dpkg-deb, dpkg or python3 only when it has to unpack. Exits
# non-zero when a step fails, the tests fail, or they skip although nvidia-smi lists a GPU (e.g. a
# driver older than the CUDA runtime needs), or a Lockstep benchmark section fails; summary.txt
# says which step and how long each took. The PyTorch side needs python3 with torch on CUDA; its
# failure is noted, not fatal. LOCKSTEP_GPU_BENCH_SECONDS (default 2) is each measurement's time;
# LOCKSTEP_GPU_GPT_BATCH (default 8) the GPT step's batch, LOCKSTEP_GPU_GPT_SECONDS (default 150)
# the most each side of the GPT step may take.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="" DEPS="${LOCKSTEP_GPU_DEPS:-$ROOT/gpu-deps}" BUILD="$ROOT/build-gpu" JOBS="$(nproc)"
FORCE_PREFIX="${LOCKSTEP_GPU_FORCE_PREFIX:-0}"
USAGE="usage: $0 --out DIR [--deps DEBS] [--build BUILD] [--jobs N] [--force-prefix]"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --deps) DEPS="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --force-prefix) FORCE_PREFIX=1; shift ;;
    *) echo "$USAGE" >&2; exit 2 ;;
  esac
done
[[ -n "$OUT" ]] || { echo "$USAGE" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# The whole run must end within 8 minutes; each step gets what is left (minus a margin).
BUDGET_S=${LOCKSTEP_GPU_CHECK_BUDGET_S:-450}
START=$SECONDS
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "gpu-check: $*" | tee -a "$SUMMARY" >&2; }
left() { echo $((BUDGET_S - (SECONDS - START))); }
step() {  # step NAME LOG CMD...: runs CMD within the time left, logs to LOG, records the outcome
  local name="$1" logf="$2"; shift 2
  local t0=$SECONDS rc=0 budget
  budget=$(left)
  if ((budget < 10)); then note "$name: not started, time budget (${BUDGET_S}s) spent"; return 1; fi
  timeout --kill-after=10 "$budget" "$@" >"$logf" 2>&1 || rc=$?
  if ((rc == 124 || rc == 137)); then
    note "$name: TIMED OUT after $((SECONDS - t0))s (log: $(basename "$logf"))"
  elif ((rc != 0)); then
    note "$name: FAILED (exit $rc) after $((SECONDS - t0))s (log: $(basename "$logf")); its end:"
    tail -n 30 "$logf" | tee -a "$SUMMARY" >&2
  else
    note "$name: ok in $((SECONDS - t0))s"
  fi
  return $rc
}

case "$(uname -m)" in
  x86_64) TRIPLET=x86_64-linux-gnu ;;
  aarch64) TRIPLET=aarch64-linux-gnu ;;
  *) TRIPLET="$(uname -m)-linux-gnu" ;;
esac

# Every NCCL warning (shared memory, sockets, proxy thread; one line each) lands in the test and
# benchmark logs, not only the last one that NcclError carries: one GPU run must be enough to
# tell why an NCCL call failed.
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"

# ---- the machine -------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(uname -a)"; echo "cores: $(nproc)"
  echo "git: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "--- nvidia-smi"; nvidia-smi 2>&1 || echo "(nvidia-smi failed or is missing)"
  echo "--- nvcc"; "${CUDACXX:-/usr/local/cuda/bin/nvcc}" --version 2>&1 || echo "(no nvcc)"
  echo "--- cmake"; cmake --version 2>&1 | head -n 1 || echo "(no cmake)"
  echo "--- c++"; c++ --version 2>&1 | head -n 1 || echo "(no c++)"
} > "$OUT/env.txt"

# ---- dependencies: the system's, or the .debs unpacked into a private prefix ------------------
CMAKE_DEP_ARGS=()
have_system_deps() {
  [[ -f /usr/include/$TRIPLET/openblas-pthread/cblas.h && -f /usr/include/gtest/gtest.h &&
     -f /usr/include/nlohmann/json.hpp && -f /usr/include/CLI/CLI.hpp && -f /usr/include/zlib.h ]]
}
PREFIX=""
# Without dpkg (a non-Debian image): a .deb is an ar archive holding data.tar.{xz,zst,gz}.
unpack_deb_python() {
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
with open(deb, "rb") as f:
    if f.read(8) != b"!<arch>\n": sys.exit(f"{deb}: not a .deb (ar) archive")
    while True:
        hdr = f.read(60)
        if len(hdr) < 60: sys.exit(f"{deb}: no data.tar member")
        name, size = hdr[:16].decode().strip().rstrip("/"), int(hdr[48:58])
        body = f.read(size); f.read(size % 2)
        if name.startswith("data.tar"):
            if name.endswith(".zst"): sys.exit(f"{deb}: data.tar.zst needs dpkg-deb or zstd")
            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
                t.extractall(dest, **kw)
            break
PY
}
if [[ "$FORCE_PREFIX" != 1 ]] && have_system_deps; then
  note "dependencies: the system's (Debian development packages are installed)"
else
  PREFIX="$OUT/prefix"
  shopt -s nullglob
  debs=("$DEPS"/*.deb)
  shopt -u nullglob
  if [[ ${#debs[@]} -eq 0 ]]; then
    note "dependencies: the development packages are not installed and $DEPS has no .deb files;"
    note "  on a Debian 12 machine run scripts/fetch-gpu-deps.sh DIR, copy DIR here, pass --deps DIR"
    exit 1
  fi
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  for deb in "${debs[@]}"; do
    if command -v dpkg-deb >/dev/null 2>&1; then dpkg-deb -x "$deb" "$PREFIX"
    elif command -v dpkg >/dev/null 2>&1; then dpkg -x "$deb" "$PREFIX"
    else unpack_deb_python "$deb" "$PREFIX"; fi
  done
  # Absolute symlinks in the packages (zlib1g-dev: libz.so -> /lib/<triplet>/libz.so.1.2.13) would
  # point at the host's files, which may be missing or another version: point them into the prefix.
  while IFS= read -r link; do
    target="$(readlink "$link")"
    if [[ "$target" == /* ]]; then ln -sfn "$PREFIX$target" "$link"; fi
  done < <(find "$PREFIX" -type l)
  LIBDIR="$PREFIX/usr/lib/$TRIPLET"
  OPENBLAS_DIR="$LIBDIR/openblas-pthread"
  # dpkg -x runs no postinst, so the update-alternatives links that Debian puts beside the other
  # libraries (libopenblas.so.0, libblas.so.3, liblapack.so.3) are missing: make them by hand.
  for so in libopenblas.so.0 libblas.so.3 liblapack.so.3; do
    if [[ -e "$OPENBLAS_DIR/$so" && ! -e "$LIBDIR/$so" ]]; then ln -s "openblas-pthread/$so" "$LIBDIR/$so"; fi
  done
  for f in "$OPENBLAS_DIR/libopenblas.so" "$OPENBLAS_DIR/libopenblas.so.0" "$LIBDIR/libz.so" \
           "$PREFIX/usr/include/$TRIPLET/openblas-pthread/cblas.h" "$PREFIX/usr/include/gtest/gtest.h" \
           "$PREFIX/usr/include/nlohmann/json.hpp" "$PREFIX/usr/include/CLI/CLI.hpp" \
           "$PREFIX/usr/include/zlib.h"; do
    [[ -e "$f" ]] || { note "dependencies: $f missing after unpacking $DEPS (re-run fetch-gpu-deps.sh)"; exit 1; }
  done
  note "dependencies: ${#debs[@]} .deb files from $DEPS unpacked into $PREFIX"
  LIBDIRS="$OPENBLAS_DIR:$LIBDIR:$PREFIX/lib/$TRIPLET"
  CMAKE_DEP_ARGS+=(
    "-DCMAKE_PREFIX_PATH=$PREFIX/usr;$PREFIX"
    "-DOPENBLAS_INCLUDE_DIR=$PREFIX/usr/include/$TRIPLET/openblas-pthread"
    "-DOPENBLAS_LIBRARY=$OPENBLAS_DIR/libopenblas.so"
    "-DZLIB_INCLUDE_DIR=$PREFIX/usr/include" "-DZLIB_LIBRARY=$LIBDIR/libz.so"
    "-DZLIB_LIBRARY_RELEASE=$LIBDIR/libz.so"
    "-DCMAKE_BUILD_RPATH=${LIBDIRS//:/;}"
    # DT_RPATH, not RUNPATH: it also serves libopenblas.so.0's own NEEDED (libgfortran.so.5), so
    # the binaries run without LD_LIBRARY_PATH too.
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags"
    "-DLOCKSTEP_MPI=OFF")
  # Every CMake package config in the prefix (GTest, nlohmann_json, CLI11, OpenBLAS), by folder:
  # CMAKE_PREFIX_PATH alone misses the multiarch folders on a non-Debian host.
  while IFS= read -r cfg; do
    pkg="$(basename "$cfg")"; pkg="${pkg%Config.cmake}"; pkg="${pkg%-config.cmake}"
    CMAKE_DEP_ARGS+=("-D${pkg}_DIR=$(dirname "$cfg")")
  done < <(find "$PREFIX" \( -name '*Config.cmake' -o -name '*-config.cmake' \) -path '*/cmake/*')
  # The loader finds OpenBLAS, gfortran, quadmath and zlib in the prefix (also for ctest's discovery).
  export LD_LIBRARY_PATH="$LIBDIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$OUT/ld-library-path.sh"
fi

# ---- NCCL: CMake needs it (LOCKSTEP_CUDA=ON); the CUDA toolkit alone does not ship it ----------
# Where neither the toolkit nor the system has libnccl.so, use PyTorch's (pip package nvidia-nccl-*:
# nvidia/nccl/lib/libnccl.so.2 and nvidia/nccl/include/nccl.h).
CUDA_ROOT="$(dirname "$(dirname "${CUDACXX:-/usr/local/cuda/bin/nvcc}")")"
have_nccl() {
  local d
  for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT"/targets/*/lib "/usr/lib/$TRIPLET" /usr/lib64 \
           /usr/local/lib; do
    [[ -e "$d/libnccl.so" ]] && return 0
  done
  return 1
}
if [[ -z "${NCCL_LIBRARY:-}" ]] && ! have_nccl; then
  nccl_dir="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)"
  nccl_lib="$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -n 1 || true)"
  if [[ -n "$nccl_dir" && -n "$nccl_lib" && -f "$nccl_dir/include/nccl.h" ]]; then
    note "NCCL: not beside the toolkit; using PyTorch's $nccl_lib"
    CMAKE_DEP_ARGS+=("-DNCCL_LIBRARY=$nccl_lib" "-DNCCL_INCLUDE_DIR=$nccl_dir/include")
    export LD_LIBRARY_PATH="$(dirname "$nccl_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    note "NCCL: no libnccl.so beside the toolkit or in the system, nor PyTorch's nvidia.nccl; configure will fail"
  fi
elif [[ -n "${NCCL_LIBRARY:-}" ]]; then
  CMAKE_DEP_ARGS+=("-DNCCL_LIBRARY=$NCCL_LIBRARY" "-DNCCL_INCLUDE_DIR=${NCCL_INCLUDE_DIR:-}")
fi

# ---- configure, build, test --------------------------------------------------------------------
generator=()
[[ -f "$BUILD/CMakeCache.txt" ]] || { command -v ninja >/dev/null 2>&1 && generator=(-G Ninja); }
rc=0
step configure "$OUT/configure.log" \
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON \
    -DLOCKSTEP_BUILD_TESTS=ON -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_BUILD_EXAMPLES=OFF \
    "${CMAKE_DEP_ARGS[@]}" || rc=$?
# With the prefix, every dependency must resolve inside it (the GPU machine has no /usr copies).
if ((rc == 0)) && [[ -n "$PREFIX" ]]; then
  grep -E '^(GTest_DIR|nlohmann_json_DIR|CLI11_DIR|OPENBLAS_LIBRARY|OPENBLAS_INCLUDE_DIR|ZLIB_LIBRARY[A-Z_]*|ZLIB_INCLUDE_DIR)[:=]' \
    "$BUILD/CMakeCache.txt" > "$OUT/deps-resolved.txt" || true
  if grep -v -e "=$PREFIX/" -e '=$' -e 'NOTFOUND' "$OUT/deps-resolved.txt" | grep -q .; then
    note "dependencies resolved outside $PREFIX (see deps-resolved.txt):"
    grep -v -e "=$PREFIX/" "$OUT/deps-resolved.txt" | tee -a "$SUMMARY" >&2
    rc=1
  else
    note "dependencies: all resolved under the prefix (deps-resolved.txt)"
  fi
fi
if ((rc == 0)); then
  step build "$OUT/build.log" cmake --build "$BUILD" --parallel "$JOBS" --target test_cuda lockstep bench_cuda bench_gpt || rc=$?
fi
if ((rc == 0)); then
  step "ctest -L cuda" "$OUT/ctest.log" \
    ctest --test-dir "$BUILD" -L cuda -V --timeout 300 --output-junit "$OUT/ctest-junit.xml" || rc=$?
  grep -E "tests passed|tests failed|Skipped|Failed|Passed" "$OUT/ctest.log" | tail -n 60 >> "$SUMMARY" || true
  if grep -q "no CUDA device:" "$OUT/ctest.log"; then
    note "NOTE: tests skipped for lack of a device: $(grep -m1 -o 'no CUDA device:.*' "$OUT/ctest.log")"
    # A GPU that nvidia-smi sees but the tests skip (driver too old for the runtime, ...) is a failure.
    if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
      note "FAILED: nvidia-smi lists a GPU but the CUDA tests skipped (see env.txt, ctest.log)"
      rc=1
    fi
  fi
  "$BUILD/lockstep" --version > "$OUT/lockstep-version.txt" 2>&1 || true
fi
# ---- benchmarks (after the tests: a failed test does not stop them) ------------------------------
if [[ -x "$BUILD/bench_cuda" ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  note "benchmarks: skipped, nvidia-smi lists no GPU"
elif [[ -x "$BUILD/bench_cuda" ]]; then
  BENCH_S="${LOCKSTEP_GPU_BENCH_SECONDS:-2}"
  step bench_cuda "$OUT/bench-lockstep.log" \
    "$BUILD/bench_cuda" --seconds "$BENCH_S" --out "$OUT/bench-lockstep.jsonl" || rc=1
  if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    step pytorch_cuda "$OUT/bench-pytorch.log" \
      python3 "$ROOT/bench/pytorch_cuda.py" --seconds "$BENCH_S" --out "$OUT/bench-pytorch.jsonl" ||
      note "pytorch_cuda: failed (not fatal; see bench-pytorch.log)"
  else
    note "pytorch_cuda: skipped, python3 has no torch with CUDA"
  fi
  python3 "$ROOT/bench/compare_cuda.py" "$OUT/bench-lockstep.jsonl" "$OUT/bench-pytorch.jsonl" \
    > "$OUT/bench-compare.md" 2>&1 || true
  cat "$OUT/bench-compare.md" >> "$SUMMARY"
  # nanoGPT's GPT-2 124M step (issue 19) on cuda:0: n_layer 12, n_head 12, n_embd 768, block 1024,
  # vocab 50304, bias off, float32 (no TF32 on either side), eager; zero_grad, forward, loss,
  # backward, clip_grad_norm_(1.0), AdamW (configure_optimizers(0.1, 1e-3, (0.9, 0.99))). Batch 8
  # (nanoGPT's GPT-2 runs use 12 under bf16 autocast with flash attention): Lockstep's CUDA
  # attention is the composed one, which keeps [B, 12, 1024, 1024] float32 score tensors per
  # layer (~3 of them, B·144 MiB a layer, B·1.7 GiB over 12), the float32 logits [B·1024, 50304]
  # with their log-softmax and gradient take ~B·0.6 GiB and the other activations ~B·1.2 GiB:
  # ~3.5 GiB a sample, so ~30 GiB at 8 with 2 GiB of parameters, gradients and AdamW state, which
  # leaves an H100's 78 GiB room for the backward's transients; 12 would be ~44 GiB before them.
  # 2 warm-up steps + 3 rounds of 3 timed steps a side (~7 TFLOP a step: 854.7 MFLOP a token by
  # estimate_mfu's 6N + 12·L·H·Q·T, N = 123.6 M, times 8192 tokens), each bounded by
  # LOCKSTEP_GPU_GPT_SECONDS.
  GPT_S="${LOCKSTEP_GPU_GPT_SECONDS:-150}"
  GPT_BATCH="${LOCKSTEP_GPU_GPT_BATCH:-8}"
  GPT_ARGS=(--layers=12 --heads=12 --embd=768 --block=1024 --vocab=50304 --batch="$GPT_BATCH"
            --warmup=2 --steps=3 --reps=3)
  if [[ -x "$BUILD/bench/bench_gpt" ]]; then
    step bench_gpt "$OUT/bench-gpt-lockstep.log" \
      timeout --kill-after=5 "$GPT_S" "$BUILD/bench/bench_gpt" --device=cuda:0 "${GPT_ARGS[@]}" ||
      rc=1
  else
    note "bench_gpt: not built"; rc=1
  fi
  if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    step pytorch_gpt "$OUT/bench-gpt-pytorch.log" \
      timeout --kill-after=5 "$GPT_S" python3 "$ROOT/bench/pytorch_gpt.py" --device=cuda:0 \
        "${GPT_ARGS[@]}" || note "pytorch_gpt: failed (not fatal; see bench-gpt-pytorch.log)"
  else
    note "pytorch_gpt: skipped, python3 has no torch with CUDA"
  fi
  # The two RESULT lines, and Lockstep's tokens/s over PyTorch's (> 1: Lockstep faster).
  python3 - "$OUT/bench-gpt-lockstep.log" "$OUT/bench-gpt-pytorch.log" >> "$SUMMARY" 2>&1 <<'PY' || true
import os, sys
rows = {}
for path in sys.argv[1:]:
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("RESULT "):
                f = dict(kv.split("=", 1) for kv in line.split()[1:])
                rows[f["framework"].split("-")[0]] = f
for fw, f in rows.items():
    print(f"GPT-2 124M step, {fw} ({f['framework']}), {f['device']}, batch {f['batch']}: "
          f"{float(f['ms_per_step']):.1f} ms/step, {float(f['tokens_per_s']):.0f} tokens/s, "
          f"{float(f['gflops']) / 1000:.1f} TFLOP/s ({f['pct_peak']} % of "
          f"{float(f['peak_gflops']) / 1000:.1f}), loss {f['loss']}")
if "lockstep" in rows and "pytorch" in rows:
    r = float(rows["lockstep"]["tokens_per_s"]) / float(rows["pytorch"]["tokens_per_s"])
    print(f"GPT-2 124M step: Lockstep / PyTorch tokens/s = {r:.2f}x")
PY
fi
note "total $((SECONDS - START))s, exit $rc"
exit $rc
