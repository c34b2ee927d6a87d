#!/usr/bin/env bash
# A/B of bench_parallel between two builds in one session: OLD and NEW binaries run alternately
# (ROUNDS rounds, the order flipping each round), each run `--benchmark_repetitions=REPS
# --benchmark_min_time=MIN_TIME` on FILTER; prints a Markdown table of the median over rounds of
# each run's median step time, [min-max] over rounds, and new/old.
#   OLD=/work/wt-old/build/bench/bench_parallel bench/ab_parallel.sh
#   OLD=... NEW=build/bench/bench_parallel ROUNDS=3 REPS=3 MIN_TIME=0.2 FILTER='ref/' bench/ab_parallel.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$ROOT/bench/openblas_env.sh"
OLD=${OLD:?set OLD to the old build\'s bench_parallel}
NEW=${NEW:-$ROOT/build/bench/bench_parallel}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}  # at least 2 (the table reads the median aggregate)
MIN_TIME=${MIN_TIME:-0.2}
FILTER=${FILTER:-'(ref|mlp)/(single/threads:1|dp1/threads:1|dp2/overlap:1|dp2/deterministic|dp2/gather)/real_time'}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() {  # $1 binary, $2 output file: "name us" per benchmark (the median aggregate)
  "$1" --benchmark_filter="$FILTER" --benchmark_repetitions="$REPS" \
    --benchmark_min_time="$MIN_TIME" --benchmark_report_aggregates_only=true \
    --benchmark_format=csv 2>/dev/null |
    awk -F, '/_median"?,/ {n=$1; gsub(/"/,"",n); sub(/\/real_time_median|_median/,"",n);
             t=$3; u=$5; gsub(/"/,"",u); if (u=="ns") t/=1000; if (u=="ms") t*=1000; print n, t}' >>"$2"
}
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then run "$OLD" "$TMP/old"; run "$NEW" "$TMP/new"; else run "$NEW" "$TMP/new"; run "$OLD" "$TMP/old"; fi
  echo "round $r of $ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
stat() { awk -v b="$1" '$1==b {print $2}' "$2" | sort -g |
  awk '{a[NR]=$1} END {if (NR==0) {print "- - -"; exit} m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f %.2f %.2f", m, a[1], a[NR]}'; }
echo "| benchmark | old (µs) | new (µs) | new/old |"
echo "|---|---|---|---|"
for b in $(awk '{print $1}' "$TMP/new" | awk '!s[$0]++'); do
  read -r om olo ohi <<<"$(stat "$b" "$TMP/old")"
  read -r nm nlo nhi <<<"$(stat "$b" "$TMP/new")"
  ratio=$(awk -v n="$nm" -v o="$om" 'BEGIN {if (o+0>0) printf "%.2f", n/o; else print "-"}')
  echo "| \`$b\` | $om [$olo–$ohi] | $nm [$nlo–$nhi] | $ratio |"
done
