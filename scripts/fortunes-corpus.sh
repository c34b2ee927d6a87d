#!/usr/bin/env bash
# The example text of gpt: models (issue 20): the plain-text files of Debian's `fortunes` package
# (with `fortunes-min`, which it pulls in; scripts/install-deps.sh installs it) under
# /usr/share/games/fortunes, without the .dat and .u8 files, sorted by name and concatenated.
#
#   scripts/fortunes-corpus.sh OUT.txt      # then: lockstep train --data text:OUT.txt ...
set -euo pipefail
out=${1:?usage: scripts/fortunes-corpus.sh OUT.txt}
dir=/usr/share/games/fortunes
[[ -d $dir ]] || { echo "fortunes-corpus: $dir missing (apt-get install fortunes)" >&2; exit 2; }
find "$dir" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -printf '%f\n' | LC_ALL=C sort |
  while read -r name; do cat "$dir/$name"; done > "$out"
