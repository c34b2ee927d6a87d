#!/usr/bin/env bash
# Runs `BINARY --torch-seed 0` and checks that it prints ten "Epoch k, Validation Loss: x" lines
# whose losses are each within 1e-4 of the EXPECTED values (PyTorch's).
#   losses_within.sh BINARY EXPECTED1 ... EXPECTED10
set -euo pipefail
binary=$1
shift
out=$("$binary" --torch-seed 0)
echo "$out"
got=$(printf '%s\n' "$out" | sed -n 's/^Epoch [0-9]*, Validation Loss: //p')
[[ $(printf '%s\n' "$got" | wc -l) -eq $# ]] || { echo "expected $# loss lines" >&2; exit 1; }
paste <(printf '%s\n' "$got") <(printf '%s\n' "$@") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 + 5e-5) { print "epoch " NR ": " $1 " vs PyTorch " $2; bad = 1 } }
       END { exit bad }'
