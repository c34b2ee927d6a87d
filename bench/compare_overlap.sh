#!/usr/bin/env bash
# Issue 22, "Speed it must measure": communication hidden behind backward, across 2 hosts.
# 2 namespace hosts x 1 rank (tests/multihost/hosts.sh: veth links to a bridge, addresses
# 10.231.7.1-2 on lsh0, nothing routed), each host's egress shaped to RATE (1 Gbit/s) plus DELAY
# (0.2 ms) where the kernel has sch_netem (without it: tbf for the rate, no delay, said so).
# `lockstep train` runs under mpirun across them (OpenMPI over TCP on lsh0 only; --bind-to none,
# each rank pinned with taskset to one CPU: host1 -> CPU 0, host2 -> CPU 1; 1 intra-op thread
# per rank, the CLI's default for a rank allowed one core), for
#   cnn  --model cnn --no-sync-bn (PyTorch's per-rank BatchNorm, apples to apples) on the first
#        CNN_SAMPLES Fashion-MNIST training images, global batch 128 (64 per rank), SGD lr 0.01,
#        CNN_EPOCHS epochs, no validation; samples/s of the last epoch (the CLI's epoch line)
#   gpt  --model gpt:layers=4,heads=4,embd=128,block=64 on the fortunes text, global batch 12
#        (6 per rank), AdamW 1e-3 betas 0.9,0.99 wd 0.1, clipping 1.0; WARM + GPT_ITERS
#        iterations, evaluations every WARM (1 batch each, outside the timed intervals);
#        tokens/s over the intervals after the first
# in each configuration --comm-overlap off|on x --grad-compression none|bf16 (bucket cap
# CNN_CAP_MB / GPT_CAP_MB: the CNN's 0.83 MB of gradients in >= 4 buckets), plus T_compute: the
# same local batch, --devices cpu:0 --backend threads (no communication), two such processes at
# once, one pinned to each CPU (the slower counts; one alone is printed too). Next to PyTorch
# DDP (gloo, TCP init_method on 10.231.7.1, each rank pinned as Lockstep's,
# torch.set_num_threads(1), same model, batch, optimizer, bucket cap), with and without
# bf16_compress_hook, on the same hosts. A CLI without the issue-22 flags (main before
# the merges) runs its default configuration only (one 25 MB bucket, blocking all-reduce in the
# gradient hook) and the fraction hidden is not computed.
#   hidden = 1 - (T_on - T_compute) / (T_off - T_compute)   per compression, from the medians
#   and from each configuration's best round (bench/overlap_report.py)
#   bench/compare_overlap.sh [BUILD_DIR]      (root: network namespaces; a benchmark, not a test)
#   env: ROUNDS=3 CNN_SAMPLES=7680 CNN_EPOCHS=2 GPT_ITERS=40 WARM=10 RATE=1gbit DELAY=0.2ms
#        CNN_CAP_MB=0.01 GPT_CAP_MB=0.5 MODELS="cnn gpt" SKIP_BUILD=0 TEXT=(made here)
#        (RATE=none: links not shaped, to see what the shaping costs)
#        EXPORT="VAR ..." more variables for the ranks (e.g. OMPI_MCA_btl_tcp_progress_thread)
#        CNN_BATCH=128 GPT_BATCH=12 (global batches; T_compute runs half of each)
#        PYTHON=/work/torch-venv/bin/python QUICK=1 (1 round, fewer steps: for iterating)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
PYTHON="${PYTHON:-$(cd "$ROOT/.." && pwd)/torch-venv/bin/python}"
if [[ "${QUICK:-0}" == 1 ]]; then
  : "${ROUNDS:=1}" "${CNN_SAMPLES:=3840}" "${GPT_ITERS:=20}" "${WARM:=5}"
fi
ROUNDS="${ROUNDS:-3}" CNN_SAMPLES="${CNN_SAMPLES:-7680}" CNN_EPOCHS="${CNN_EPOCHS:-2}"
GPT_ITERS="${GPT_ITERS:-40}" WARM="${WARM:-10}" RATE="${RATE:-1gbit}" DELAY="${DELAY:-0.2ms}"
CNN_CAP_MB="${CNN_CAP_MB:-0.01}" GPT_CAP_MB="${GPT_CAP_MB:-0.5}" MODELS="${MODELS:-cnn gpt}"
CNN_BATCH="${CNN_BATCH:-128}" GPT_BATCH="${GPT_BATCH:-12}"
source "$ROOT/bench/openblas_env.sh"
source "$ROOT/bench/cpu_other.sh"
export OPENBLAS_NUM_THREADS=1
[[ "${SKIP_BUILD:-0}" == 1 ]] || cmake --build "$BUILD" --target lockstep bench_allreduce >/dev/null
CLI="$(realpath "$BUILD/lockstep")"
work="$(mktemp -d /tmp/lsh-overlap.XXXXXX)"
source "$ROOT/tests/multihost/hosts.sh"
source "$ROOT/bench/shaped_hosts.sh"
cleanup() { mh_down; rm -rf "$work"; }
trap cleanup EXIT

echo "== machine: $(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) cores," \
  "$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r)"
echo "== date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); git $(git -C "$ROOT" rev-parse --short HEAD)$(
  git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
echo "== $("$CLI" --version 2>&1 | head -n 1); $(mpirun --version | head -n 1);" \
  "$("$PYTHON" -c 'import torch; print("torch", torch.__version__)')"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS;" \
  "niceness $(nice) (run it under nice -n -19 to measure on a machine others load)"
echo "== rounds $ROUNDS; cnn: $CNN_SAMPLES samples x $CNN_EPOCHS epochs, cap $CNN_CAP_MB MB;" \
  "gpt: $WARM + $GPT_ITERS iterations, cap $GPT_CAP_MB MB"

# --- data: the CNN's subset (uncompressed IDX, read by both sides) and the text
"$PYTHON" - "$CNN_SAMPLES" "$work" <<'PY'
import gzip, struct, sys
n, out = int(sys.argv[1]), sys.argv[2]
src = "/usr/share/datasets/fashion-mnist/"
for name, item in (("train-images-idx3-ubyte", 784), ("train-labels-idx1-ubyte", 1)):
    raw = gzip.open(src + name + ".gz").read()
    ndim = raw[3]
    dims = list(struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim]))
    assert dims[0] >= n, f"{name} has only {dims[0]} items"
    dims[0] = n
    head = raw[:4] + struct.pack(">" + "I" * ndim, *dims)
    open(f"{out}/{name}", "wb").write(head + raw[4 + 4 * ndim:4 + 4 * ndim + n * item])
PY
IMAGES="$work/train-images-idx3-ubyte" LABELS="$work/train-labels-idx1-ubyte"
TEXT="${TEXT:-$work/fortunes.txt}"
[[ -f "$TEXT" ]] || "$ROOT/scripts/fortunes-corpus.sh" "$TEXT"

# --- hosts and links
mh_up 2
trap cleanup EXIT  # mh_up set its own (mh_down alone)
shaping=$(shape_links "$RATE" "$DELAY")
echo "== links: each host's egress: $shaping"
pin_ranks "$work" "OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS ${EXPORT:-}"

has_flags=0
[[ "$("$CLI" train --help)" == *--comm-overlap* ]] && has_flags=1
if [[ $has_flags == 1 ]]; then
  configs=("off none" "on none" "off bf16" "on bf16")
else
  configs=("default none")
  echo "== this CLI has no --comm-overlap/--bucket-cap-mb/--grad-compression: default only"
fi

model_args() {  # model_args MODEL GLOBAL_BATCH
  if [[ $1 == cnn ]]; then
    echo --model cnn --no-sync-bn --data "idx:$IMAGES,$LABELS" --val-fraction 0 \
      --batch-size "$2" --epochs "$CNN_EPOCHS"
  else
    echo --model gpt:layers=4,heads=4,embd=128,block=64 --data "text:$TEXT" --batch-size "$2" \
      --max-iters $((WARM + GPT_ITERS)) --eval-interval "$WARM" --eval-iters 1 --lr 1e-3 \
      --betas 0.9,0.99 --weight-decay 0.1 --clip-grad-norm 1 --seed 1337
  fi
}
out="$work/results"
tx_bytes() { ip netns exec "$(mh_ns host1)" cat /sys/class/net/lsh0/statistics/tx_bytes; }
wire() {  # wire MODEL TX_BEFORE: KB host1 sent per step over the run (start-up, evaluations in)
  local steps
  [[ $1 == cnn ]] && steps=$((CNN_EPOCHS * (CNN_SAMPLES / CNN_BATCH))) || steps=$((WARM + GPT_ITERS))
  echo "wire_kb_per_step=$(( ($(tx_bytes) - $2) / 1024 / steps ))"
}
rate_of() {  # rate_of MODEL LOG: samples/s (cnn: the last epoch) or tokens/s (gpt: after WARM)
  if [[ $1 == cnn ]]; then
    awk '/^epoch /{for (i = 1; i < NF; i++) if ($i == "samples/s") r = $(i + 1)} END {print r}' "$2"
  else  # tokens over the intervals after the first, by their times
    awk -v w="$WARM" '/^iter /{split($2, a, "/"); for (i = 1; i < NF; i++)
           if ($i == "tokens/s") { if (a[1] > w) { n = a[1] - last; t += n / $(i + 1); s += n }
                                   last = a[1] } } END {if (t > 0) print s / t}' "$2"
  fi
}
record() {  # record MODEL CONFIG LOG [MORE]: one RESULT line from the CLI's output
  local rate
  rate=$(rate_of "$1" "$3")
  if [[ -z "$rate" ]]; then
    echo "compare_overlap.sh: no rate from lockstep ($1 $2):"; cat "$3"; return 1
  fi
  echo "RESULT side=lockstep model=$1 config=$2 rate=$rate ${4:-}" | tee -a "$out"
}
lockstep_dist() {  # lockstep_dist MODEL OVERLAP COMPRESSION
  local m=$1 cap batch
  [[ $m == cnn ]] && cap=$CNN_CAP_MB batch=$CNN_BATCH || cap=$GPT_CAP_MB batch=$GPT_BATCH
  local flags=() tx0
  tx0=$(tx_bytes)
  [[ $2 != default ]] && flags=(--comm-overlap "$2" --grad-compression "$3" --bucket-cap-mb "$cap")
  # shellcheck disable=SC2046
  mh_mpirun host1,host2 2 "$work/pin.sh" "$CLI" train $(model_args "$m" "$batch") "${flags[@]}" \
    --timeout 60 >"$work/log" 2>&1 || { echo "lockstep $m $2 $3 failed:"; cat "$work/log"; return 1; }
  record "$m" "$2/$3" "$work/log" "$(wire "$m" "$tx0")"
}
# T_compute: the local batch without communication, as two independent processes at once, one
# pinned to each CPU as the ranks are (the slower one counts): on a machine that other jobs load,
# the ranks share what this benchmark gets of the 2 CPUs, and so must the reference. One process
# alone ("compute-alone") is printed beside it.
lockstep_compute() {  # lockstep_compute MODEL
  local m=$1 batch c pids=()
  [[ $m == cnn ]] && batch=$((CNN_BATCH / 2)) || batch=$((GPT_BATCH / 2))
  for c in 0 1; do
    # shellcheck disable=SC2046
    (cd "$work" && taskset -c "$c" "$CLI" train $(model_args "$m" "$batch") --devices cpu:0 \
      --backend threads) >"$work/log$c" 2>&1 &
    pids+=($!)
  done
  for c in 0 1; do
    wait "${pids[$c]}" || { echo "lockstep compute $m on CPU $c failed:"; cat "$work/log$c"; return 1; }
  done
  local r0 r1
  r0=$(rate_of "$m" "$work/log0") r1=$(rate_of "$m" "$work/log1")
  echo "RESULT side=lockstep model=$m config=compute rate=$(awk -v a="$r0" -v b="$r1" \
    'BEGIN { print (a < b ? a : b) }') cpu0=$r0 cpu1=$r1" | tee -a "$out"
  # shellcheck disable=SC2046
  (cd "$work" && taskset -c 0 "$CLI" train $(model_args "$m" "$batch") --devices cpu:0 \
    --backend threads) >"$work/log" 2>&1 || { echo "lockstep compute $m failed:"; cat "$work/log"; return 1; }
  record "$m" compute-alone "$work/log"
}
pytorch_dist() {  # pytorch_dist MODEL HOOK
  local m=$1 r pids=() args tx0
  tx0=$(tx_bytes)
  if [[ $m == cnn ]]; then
    args=(--model cnn --images "$IMAGES" --labels "$LABELS" --batch "$CNN_BATCH" --epochs
          "$CNN_EPOCHS" --bucket-cap-mb "$CNN_CAP_MB")
  else
    args=(--model gpt --text "$TEXT" --batch "$GPT_BATCH" --iters "$GPT_ITERS" --warm "$WARM"
          --bucket-cap-mb "$GPT_CAP_MB")
  fi
  for r in 0 1; do
    GLOO_SOCKET_IFNAME=lsh0 timeout 300 ip netns exec "$(mh_ns host$((r + 1)))" taskset -c "$r" \
      "$PYTHON" "$ROOT/bench/pytorch_ddp_overlap.py" --rank "$r" --world 2 \
      --init "tcp://$MH_NET.1:29522" --hook "$2" --threads 1 "${args[@]}" >"$work/py$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || { echo "pytorch rank $r ($m $2) failed:"; cat "$work/py$r"; }; done
  grep '^RESULT' "$work/py0" | sed -E 's/^RESULT /RESULT side=pytorch config=ddp\/'"$2"' /' |
    sed "s/\$/ $(wire "$m" "$tx0")/" | tee -a "$out"
}

echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# What one all-reduce costs on these links (Lockstep's mpi backend and MPI_Allreduce, the
# slower rank's time per call, best of 3): the communication a step has to hide.
if [[ -x "$BUILD/bench/bench_allreduce" ]]; then
  echo "== all_reduce over the links: bench_allreduce --min-bytes=262144 --max-bytes=4194304"
  mh_mpirun host1,host2 2 "$work/pin.sh" "$(realpath "$BUILD/bench/bench_allreduce")" \
    --min-bytes=262144 --max-bytes=4194304 --factor=2 --min-time=0.3 --reps=3 2>&1 |
    grep -v '^\[' || echo "(bench_allreduce failed)"
fi
for r in $(seq "$ROUNDS"); do
  other_cpu_start
  for m in $MODELS; do
    lockstep_compute "$m"
    # shellcheck disable=SC2086 # "OVERLAP COMPRESSION": two arguments
    for c in "${configs[@]}"; do lockstep_dist "$m" $c; done
    pytorch_dist "$m" none
    pytorch_dist "$m" bf16
  done
  other_cpu_report "round $r of $ROUNDS, load $(cut -d' ' -f1 /proc/loadavg)"
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" "$ROOT/bench/overlap_report.py" "$out" "$CNN_BATCH" "$GPT_BATCH"
