#!/usr/bin/env bash
# Runs an example and checks the losses it prints on its "epoch k ... loss X" / "iter k ... loss X"
# lines: at least two, none NaN, the last at most RATIO times the first (training made progress).
# Given a second command (after a second --), that one must print as many losses, each within TOL
# of the first command's (TOL 0: the same digits; e.g. 1 device against 2 in deterministic mode).
# Given EXPECT (an extended regex, '' for none), the first command's output must match it.
#   loss_check.sh RATIO TOL EXPECT -- COMMAND... [-- COMMAND...]
set -euo pipefail
ratio=$1 tol=$2 expect=$3
shift 3
[[ ${1-} == -- ]] || { echo "usage: loss_check.sh RATIO TOL EXPECT -- COMMAND... [-- COMMAND...]" >&2; exit 2; }
shift
first=() second=()
while (($#)); do
  if [[ $1 == -- ]]; then second=("${@:2}"); break; fi
  first+=("$1")
  shift
done

# run COMMAND...: its output on stdout (and echoed to stderr for the log); fails with it.
run() {
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  printf '$ %s\n%s\n' "$*" "$out" >&2
  ((rc == 0)) || { echo "loss_check: exit status $rc" >&2; exit 1; }
  printf '%s\n' "$out"
}
losses() { sed -nE 's/^(epoch|iter) [0-9]+ .*loss ([^ ]+).*/\2/p'; }

out=$(run "${first[@]}")
a=$(losses <<<"$out")
[[ $(grep -c . <<<"$a") -ge 2 ]] || { echo "loss_check: fewer than two loss lines" >&2; exit 1; }
awk -v r="$ratio" 'NR == 1 { f = $1 } { if ($1 !~ /^[0-9.eE+-]+$/) { print "loss_check: loss " NR " is " $1; bad = 1 }; l = $1 }
     END { if (bad) exit 1; if (!(l + 0 <= r * f)) { print "loss_check: last loss " l " is not <= " r " x first " f; exit 1 } }' <<<"$a" >&2
if [[ -n $expect && ! $out =~ $expect ]]; then
  echo "loss_check: the output does not match '$expect'" >&2
  exit 1
fi
if ((${#second[@]})); then
  b=$(run "${second[@]}" | losses)
  [[ $(grep -c . <<<"$b") -eq $(grep -c . <<<"$a") ]] || { echo "loss_check: the two runs print different numbers of losses" >&2; exit 1; }
  paste <(printf '%s\n' "$a") <(printf '%s\n' "$b") |
    awk -v tol="$tol" '{ d = $1 - $2; if (d < 0) d = -d; if (!(d <= tol) || $2 !~ /^[0-9.eE+-]+$/) { print "loss_check: loss " NR ": " $1 " vs " $2 " (tolerance " tol ")"; bad = 1 } }
                       END { exit bad }' >&2
fi
echo "loss_check: passed" >&2
