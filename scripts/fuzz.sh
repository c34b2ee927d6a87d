#!/usr/bin/env bash
# Builds every libFuzzer target (fuzz/fuzz_*.cpp) with clang-14, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/ (the library as unity batches, as CI's other
# instrumented builds: less compile time cold), then runs each for SECONDS (default 30) starting
# from a small generated seed corpus in build-fuzz/corpus/<name>/ (name: idx, csv, ...).
# Exit status 0 when no fuzzer found a crash, 1 otherwise; crashing inputs are kept in
# build-fuzz/artifacts/, the fuzzers' output in build-fuzz/logs/.
#
#   scripts/fuzz.sh [SECONDS]        environment: JOBS (build jobs, default 2)
set -euo pipefail

secs=${1:-30}
if ! [[ $secs =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS]   (SECONDS: a positive integer, default 30)" >&2
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-fuzz
jobs=${JOBS:-2}

for tool in clang-14 clang++-14 cmake gzip; do
  command -v "$tool" > /dev/null || { echo "fuzz.sh: $tool not found (scripts/install-deps.sh)" >&2; exit 2; }
done
generator=()
command -v ninja > /dev/null && [[ ! -f $build/CMakeCache.txt ]] && generator=(-G Ninja)

echo "== configure $build (clang-14, ASan + UBSan + libFuzzer)"
CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOCKSTEP_BUILD_FUZZERS=ON -DLOCKSTEP_BUILD_TESTS=OFF -DLOCKSTEP_BUILD_BENCH=OFF \
  -DLOCKSTEP_BUILD_EXAMPLES=OFF -DLOCKSTEP_UNITY_BUILD=ON > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log" >&2; exit 1; }
mv "$build.configure.log" "$build/configure.log"
echo "== build (target fuzzers, -j$jobs)"
nice cmake --build "$build" --target fuzzers -j "$jobs"

# ---- seed corpora -------------------------------------------------------------------------
# be32 N / le64 N: N as 4 big-endian / 8 little-endian bytes, written as printf escapes;
# pixels N: N byte escapes (i * 37 mod 256).
be32() { printf '\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
le64() { local i; for i in 0 1 2 3 4 5 6 7; do printf '\\x%02x' $(($1 >> (8 * i) & 255)); done; }
pixels() { local i; for ((i = 0; i < $1; i++)); do printf '\\x%02x' $((i * 37 % 256)); done; }

seed_idx() {  # tiny valid image and label files, raw and gzipped, plus the magic of each
  local d=$1
  printf "\\x00\\x00\\x08\\x03$(be32 2)$(be32 3)$(be32 4)$(pixels 24)" > "$d/images-2x3x4"
  printf "\\x00\\x00\\x08\\x01$(be32 5)\\x00\\x01\\x09\\x03\\x07" > "$d/labels-5"
  printf "\\x00\\x00\\x08\\x03$(be32 1)$(be32 28)$(be32 28)$(pixels 784)" > "$d/images-1x28x28"
  gzip -9 -n -c "$d/images-2x3x4" > "$d/images-2x3x4.gz"
  gzip -9 -n -c "$d/labels-5" > "$d/labels-5.gz"
  gzip -1 -n -c "$d/images-1x28x28" > "$d/images-1x28x28.gz"
}
seed_csv() {  # first byte: label column as a signed byte (0xff = -1)
  local d=$1
  printf '\xffx1,x2,label\n1.5,-2,3\n0.25,4e2,0\n' > "$d/header-last"
  printf '\x001,2.0,3\r\n4,5,6\r\n\r\n' > "$d/crlf-first"
  printf '\xfe a , b , c \n+1,.5,2\n-0,5.,1e-3\n' > "$d/spaces-middle"
  printf '\x01\xef\xbb\xbf1,2\n3,4\n' > "$d/bom"
}
seed_safetensors() {  # a 2-tensor file with metadata (header padded with spaces to 8 bytes)
  local d=$1
  local header='{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]}}'
  while (( ${#header} % 8 )); do header+=' '; done
  { printf "$(le64 ${#header})"; printf %s "$header"; printf '\x00\x00\x80\x3f\x00\x00\x00\x40\x07\x00\x00\x00\x00\x00\x00\x00'; } > "$d/two-tensors"
  printf "$(le64 2){}" > "$d/empty"
}
seed_layers() {  # model files in docs/cli.md's layer grammar, with comments, pairs and keywords
  local d=$1
  printf "# the main job's CNN on 1x6x6\nConv2d(1,16,3,padding=1) BatchNorm2d(16) ReLU MaxPool2d(2)\nFlatten Linear(144,10)\n" > "$d/cnn"
  printf 'Linear(8, 4)\nBatchNorm1d(4, momentum=None)\nTanh\nDropout(0.5)\nLinear(4, 2, bias=false)\n' > "$d/mlp"
  printf 'Conv2d(1, 2, (3, 2), stride=[2, 1], dilation=2, groups=1) AvgPool2d(2, 1, 1) AdaptiveAvgPool2d((1, 1)) Flatten(1, -1) Linear(2, 3)' > "$d/pairs"
}
seed_prompt() {  # a vocabulary, a zero byte, a prompt
  local d=$1
  printf ' !abc\x00abc a' > "$d/ascii"
  printf '\n abc\xc3\xa9\x00\n\xc3\xa9t\xc3\xa9' > "$d/utf8"
  printf 'ab\x00a\tb\n' > "$d/control"
}

mkdir -p "$build/corpus" "$build/artifacts" "$build/logs"
shopt -s nullglob
fuzzers=("$build"/fuzz/fuzz_*)
if (( ${#fuzzers[@]} == 0 )); then
  echo "fuzz.sh: no fuzzers were built in $build/fuzz" >&2
  exit 1
fi

failed=()
summary=()
for exe in "${fuzzers[@]}"; do
  [[ -x $exe && -f $exe ]] || continue
  name=${exe##*/fuzz_}
  corpus=$build/corpus/$name
  mkdir -p "$corpus"
  if declare -F "seed_$name" > /dev/null; then
    "seed_$name" "$corpus"
  else
    echo "fuzz.sh: no seeds for $name; starting from an empty corpus"
  fi
  log=$build/logs/$name.log
  echo "== fuzz_$name for ${secs}s (corpus $corpus, $(ls "$corpus" | wc -l) inputs)"
  status=0
  "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" "$corpus" > "$log" 2>&1 ||
    status=$?
  runs=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 || true)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  if (( status != 0 )); then
    failed+=("$name")
    summary+=("FAIL fuzz_$name (exit $status; log $log)")
    echo "---- fuzz_$name failed (exit $status); end of its log:"
    tail -n 60 "$log"
  else
    summary+=("ok   fuzz_$name: ${runs:-?}s, ${cov:-no coverage line}")
  fi
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if (( ${#failed[@]} )); then
  echo "fuzz.sh: ${#failed[@]} fuzzer(s) failed: ${failed[*]} (crashing inputs in $build/artifacts/)"
  exit 1
fi
echo "fuzz.sh: all ${#summary[@]} fuzzers ran ${secs}s without a crash"
