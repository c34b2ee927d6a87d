#!/usr/bin/env bash
# One fault test of the mpi backend (ctest mpi.fault_*): runs the mpi_fault job under mpirun and
# passes when mpirun exits non-zero, the job ended within WITHIN seconds (the collective
# timeout plus a few seconds, or well inside it when mpirun itself must end the job) and every
# PATTERN (grep -E) matches a line of the job's output.
#
#   fault_test.sh MPIEXEC MPI_FAULT MODE RANKS TIMEOUT WITHIN [PATTERN...]
#
# A rank that is still stopped or alive afterwards (pids from $MPI_FAULT_PID_DIR) is continued
# and killed, and fails the test: mpirun must not leave ranks behind.
set -u
mpiexec=$1 binary=$2 mode=$3 ranks=$4 timeout_s=$5 within=$6
shift 6

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export MPI_FAULT_PID_DIR=$dir

start=$(date +%s.%N)
# The outer `timeout` only guards against a hang of mpirun itself.
timeout -k 5 $((within + 60)) "$mpiexec" -np "$ranks" --oversubscribe "$binary" "$mode" "$timeout_s" \
  >"$dir/out" 2>&1
status=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$dir/out"
echo "fault_test: mode $mode, $ranks ranks: mpirun exited with status $status after ${elapsed} s"

fail=0
if [ "$status" -eq 0 ]; then
  echo "fault_test: FAIL: mpirun exited with status 0"
  fail=1
fi
if [ "$(echo "$elapsed > $within" | bc)" -eq 1 ]; then
  echo "fault_test: FAIL: the job took ${elapsed} s, more than $within s"
  fail=1
fi
for pattern in "$@"; do
  if ! grep -Eq -- "$pattern" "$dir/out"; then
    echo "fault_test: FAIL: no line matches: $pattern"
    fail=1
  fi
done
for f in "$dir"/pid.*; do
  [ -e "$f" ] || continue
  pid=$(cat "$f")
  if [ -d "/proc/$pid" ] && grep -q mpi_fault "/proc/$pid/cmdline" 2>/dev/null; then
    echo "fault_test: FAIL: rank ${f##*.} (pid $pid) is still there after mpirun exited; killing it"
    kill -CONT "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "fault_test: PASS"
exit "$fail"
