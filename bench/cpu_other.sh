# shellcheck shell=bash
# Sourced by benchmark scripts (bash): how much CPU other processes took while a benchmark ran.
#   other_cpu_start          before the measured commands (in the script's own shell)
#   other_cpu_report LABEL   after them: prints "== LABEL: W s wall, other processes used C
#                            cores": the machine's busy CPU (/proc/stat, USER_HZ = 100) less
#                            what this shell's finished children used (bash `times`)
# (bench/compare_core.sh, compare_parallel.sh and compare_ddp.sh hold their own copies of this.)
_cpu_all() { awk '/^cpu /{ printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat; }
_cpu_children() {  # into _OC_C: `times` runs in this shell (not in a $(...) subshell)
  times >"${TMPDIR:-/tmp}/.cpu_other.$$"
  _OC_C=$(awk 'NR == 2 { s = 0; for (i = 1; i <= NF; i++) { split($i, p, "m"); s += p[1] * 60 + p[2] }
                         printf "%.2f", s }' "${TMPDIR:-/tmp}/.cpu_other.$$")
  rm -f "${TMPDIR:-/tmp}/.cpu_other.$$"
}
other_cpu_start() {
  _cpu_children
  _OC_C0=$_OC_C _OC_A0=$(_cpu_all) _OC_T0=$(date +%s.%N)
}
other_cpu_report() {
  _cpu_children
  awk -v a="$_OC_A0" -v A="$(_cpu_all)" -v c="$_OC_C0" -v C="$_OC_C" -v t="$_OC_T0" \
    -v T="$(date +%s.%N)" -v l="$1" \
    'BEGIN { o = ((A - a) - (C - c)) / (T - t); if (o < 0) o = 0
             printf "== %s: %.1f s wall, other processes used %.2f cores\n", l, T - t, o }'
}
